//! What an observer knows of the election, and how it learns it: a pure state machine fed the
//! members' messages (over pilot, the election topic itself) or a member's own reports (over
//! http, its `/events`), with the time each arrived. It lives in the core so that the
//! simulator runs it beside the members and holds what it names to the election's invariants
//! (an observer names only a leader the cluster elected, in the term it was elected in).
//!
//! An observer votes for nobody and promises nothing, so it cannot vouch for any lease: it only
//! says which leader it last heard of, in which term, and when. It takes a leader as current
//! until that leader's own election timeout has passed without word of it (over http: until
//! the member it follows has been silent for the stream's bound), the way a follower does, and
//! never lets the term go back. Every change it sees becomes a [`Transition`] of its own, for
//! its history, its event stream and its `--on-change` hook.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::interface::{Member, Reason, Role, Transition, View};
use crate::membership::MemberSet;
use crate::message::{Advert, Announced, Body, Candidacy, Message, Versions};
use crate::timings::Timings;

/// What the observer heard of its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Heard {
    id: String,
    /// When the observer first heard of it in this term.
    since: Instant,
    /// The last word of it: a heartbeat, or a member saying so.
    at: Instant,
    /// Silent this long after `at`, it no longer counts.
    for_: Duration,
}

/// A member as the observer heard it (over pilot; over http only the member it follows).
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    seq: u64,
    priority: u32,
    candidacy: Option<Candidacy>,
    healthy: Option<bool>,
    fingerprint: String,
    timings: Option<Announced>,
    speaks: Option<Versions>,
}

impl Seen {
    /// A member first heard of at `now`, before anything it said is known.
    fn unheard(now: Instant) -> Seen {
        Seen {
            at: now,
            seq: 0,
            priority: 0,
            candidacy: None,
            healthy: None,
            fingerprint: String::new(),
            timings: None,
            speaks: None,
        }
    }
}

/// An observer's knowledge.
#[derive(Debug, Clone)]
pub struct Observed {
    node_id: String,
    group: String,
    members: MemberSet,
    /// How long a leader counts without word of it when it announced no timings (a build of
    /// protocol version 2), and over http: how long the followed member may be silent.
    fallback: Duration,
    term: u64,
    leader: Option<Heard>,
    /// A leader that resigned in this term: its late heartbeats of that term are stale.
    resigned: Option<(String, u64)>,
    seen: BTreeMap<String, Seen>,
}

impl Observed {
    /// The observer `node_id` of `group`'s election among `members`, knowing nothing yet;
    /// `fallback` stands for the election timeout of members that announce none.
    pub fn new(node_id: &str, group: &str, members: MemberSet, fallback: Duration) -> Observed {
        Observed {
            node_id: node_id.to_string(),
            group: group.to_string(),
            members,
            fallback,
            term: 0,
            leader: None,
            resigned: None,
            seen: BTreeMap::new(),
        }
    }

    /// The highest term it has seen in force.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The leader it takes as current at `now`.
    pub fn leader_at(&self, now: Instant) -> Option<&str> {
        self.leader
            .as_ref()
            .filter(|l| now < l.at + l.for_)
            .map(|l| l.id.as_str())
    }

    /// When the leader stops counting unless heard of again.
    pub fn deadline(&self) -> Option<Instant> {
        self.leader.as_ref().map(|l| l.at + l.for_)
    }

    fn set_leader(
        &mut self,
        now: Instant,
        id: Option<&str>,
        for_: Duration,
        reason: Reason,
    ) -> Option<Transition> {
        let previous = self.leader.as_ref().map(|l| l.id.clone());
        match (id, &mut self.leader) {
            (Some(id), Some(l)) if l.id == id => {
                l.at = now;
                l.for_ = for_;
                return None;
            }
            (Some(id), _) => {
                self.leader = Some(Heard {
                    id: id.to_string(),
                    since: now,
                    at: now,
                    for_,
                })
            }
            (None, _) => self.leader = None,
        }
        let leader = self.leader.as_ref().map(|l| l.id.clone());
        (previous != leader).then_some(Transition {
            term: self.term,
            leader,
            previous,
            reason,
        })
    }

    /// A higher term: whoever led before no longer does.
    fn raise_term(&mut self, now: Instant, term: u64) -> Option<Transition> {
        if term <= self.term {
            return None;
        }
        self.term = term;
        self.set_leader(now, None, Duration::ZERO, Reason::HigherTerm)
    }

    /// One message of the election topic (already verified, if a key is given). Only members'
    /// messages of this group count, as for a member (rule 1); another observer's
    /// announcement is not one.
    pub fn on_message(&mut self, now: Instant, m: &Message) -> Vec<Transition> {
        let mut out = Vec::new();
        if m.group != self.group || m.observer || !self.members.contains(&m.from) {
            return out;
        }
        self.record(now, m);
        let own_t = m.timings.map_or(self.fallback, |a| a.election_timeout());
        // Terms count from what shows a term in force: a leader's word, a follower's ack, a
        // granted vote, a presence. A candidate's request does not (the others refuse it while
        // their leader lives), nor a pre-vote.
        let shows_term = match &m.body {
            Body::Election { .. } => false,
            Body::Vote {
                pre_vote, granted, ..
            } => !*pre_vote && *granted,
            _ => true,
        };
        if shows_term {
            out.extend(self.raise_term(now, m.term));
        }
        if m.term < self.term {
            return out;
        }
        match &m.body {
            Body::Heartbeat { .. } | Body::Leader { .. } => {
                let stale = self
                    .resigned
                    .as_ref()
                    .is_some_and(|(id, t)| *id == m.from && *t == m.term);
                let other = self
                    .leader
                    .as_ref()
                    .is_some_and(|l| l.id != m.from && now < l.at + l.for_);
                // One leader per term: a second one in the same term would be an impostor.
                if !stale && !other {
                    out.extend(self.set_leader(now, Some(&m.from), own_t, Reason::Elected));
                }
            }
            Body::Resign { successor, .. }
                if self.leader.as_ref().is_some_and(|l| l.id == m.from) =>
            {
                self.resigned = Some((m.from.clone(), m.term));
                let reason = match successor {
                    Some(_) => Reason::Transfer,
                    None => Reason::StepDown,
                };
                out.extend(self.set_leader(now, None, Duration::ZERO, reason));
            }
            _ => {}
        }
        out
    }

    /// What the member `node` says now (over http: an event of its `/events`, or a keep-alive
    /// repeating it). A member that is behind (a lower term) is not believed.
    pub fn on_report(
        &mut self,
        now: Instant,
        node: &str,
        leader: Option<&str>,
        term: u64,
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        if term < self.term {
            return out;
        }
        let seen = self
            .seen
            .entry(node.to_string())
            .or_insert_with(|| Seen::unheard(now));
        seen.at = now;
        out.extend(self.raise_term(now, term));
        let reason = match leader {
            Some(_) => Reason::Elected,
            None => Reason::LeaderTimeout,
        };
        out.extend(self.set_leader(now, leader, self.fallback, reason));
        out
    }

    /// The leader has not been heard of for its time: it no longer counts.
    pub fn on_time(&mut self, now: Instant) -> Option<Transition> {
        let over = self.leader.as_ref().is_some_and(|l| now >= l.at + l.for_);
        if over {
            return self.set_leader(now, None, Duration::ZERO, Reason::LeaderTimeout);
        }
        None
    }

    fn record(&mut self, now: Instant, m: &Message) {
        let e = self
            .seen
            .entry(m.from.clone())
            .or_insert_with(|| Seen::unheard(now));
        e.at = now;
        if m.seq < e.seq {
            return;
        }
        e.seq = m.seq;
        e.fingerprint.clone_from(&m.members);
        e.timings = m.timings;
        e.speaks = Some(m.speaks.unwrap_or(Versions::only(m.v)));
        if let Some(a) = m.body.advert() {
            e.priority = a.priority;
            e.candidacy = Some(a.candidacy);
            e.healthy = Some(!a.unhealthy);
        }
    }

    /// What tells the members an observer is there (over pilot, every few seconds): a
    /// presence, withdrawn, hearing nobody, in the term it knows, marked `observer` so that no
    /// member hands it to its core (a member records it for its `/status`). `seq` numbers the
    /// observer's announcements; `timings` are its own, announced as a member's are.
    pub fn announcement(&self, seq: u64, timings: &Timings) -> Message {
        let advert = Advert {
            priority: 0,
            candidacy: Candidacy::Withdrawn,
            hears: Vec::new(),
            member_ids: self.members.ids().map(str::to_string).collect(),
            flapped: false,
            unhealthy: false,
        };
        Message {
            term: self.term,
            seq,
            members: self.members.fingerprint().to_string(),
            timings: Some(Announced::of(timings)),
            observer: true,
            ..Message::new(
                self.group.clone(),
                self.node_id.clone(),
                Body::Presence { advert },
            )
        }
    }

    /// The view it publishes: a follower that votes for nobody and never leads. Its leader is
    /// vouched for only until it has gone unheard for its time (`leader_until`).
    pub fn view(&self) -> View {
        let l = self.leader.as_ref();
        View {
            node_id: self.node_id.clone(),
            role: Role::Follower,
            term: self.term,
            leader: l.map(|l| l.id.clone()),
            voted_for: None,
            lease_until: None,
            leader_until: l.map(|l| l.at + l.for_),
            leader_heard_at: l.map(|l| l.at),
            leader_since: l.map(|l| l.since),
            priority: 0,
            eligible: false,
            candidacy: Candidacy::Withdrawn,
            can_campaign: false,
            can_vote: false,
            config_conflicts: Vec::new(),
            shutting_down: false,
            promise: None,
            writes_version: Versions::OURS.newest,
            maintenance: false,
            healthy: true,
        }
    }

    /// The members as heard: live within their own election timeout (or the fallback).
    pub fn members(&self, now: Instant) -> Vec<Member> {
        self.members
            .ids()
            .filter(|id| *id != self.node_id)
            .map(|id| {
                let s = self.seen.get(id);
                let window = s
                    .and_then(|s| s.timings)
                    .map_or(self.fallback, |a| a.election_timeout());
                let live = s.is_some_and(|s| now < s.at + window);
                Member {
                    id: id.to_string(),
                    priority: s.map_or(0, |s| s.priority),
                    candidacy: s.and_then(|s| s.candidacy),
                    fingerprint: s.map(|s| s.fingerprint.clone()).filter(|f| !f.is_empty()),
                    last_seen: s.map(|s| s.at),
                    live,
                    // An observer hears the members but they do not hear it: no link of its
                    // is two-way, and nothing it knows makes a member viable.
                    two_way: false,
                    viable: false,
                    member_difference: Vec::new(),
                    timings: s.and_then(|s| s.timings),
                    speaks: s.and_then(|s| s.speaks),
                    healthy: s.and_then(|s| s.healthy),
                    eligible_since: None,
                }
            })
            .collect()
    }

    /// Members heard within their time, for readiness.
    pub fn members_live(&self, now: Instant) -> usize {
        self.members(now).iter().filter(|m| m.live).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Advert;
    use crate::Timings;

    const T: Duration = Duration::from_secs(3);

    struct Wire {
        #[allow(clippy::disallowed_methods)]
        t0: Instant,
        seq: u64,
        set: MemberSet,
    }

    impl Wire {
        fn new() -> Wire {
            Wire {
                // Any instant will do: every time here is an offset from it.
                #[allow(clippy::disallowed_methods)]
                t0: Instant::now(),
                seq: 0,
                set: MemberSet::new("a", ["a", "b", "c"]).unwrap(),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        fn msg(&mut self, from: &str, term: u64, body: Body) -> Message {
            self.seq += 1;
            Message {
                term,
                seq: self.seq,
                members: self.set.fingerprint().to_string(),
                timings: Some(Announced::of(&Timings::default())),
                ..Message::new("g".into(), from.into(), body)
            }
        }

        fn advert(&self) -> Advert {
            Advert {
                priority: 5,
                candidacy: Candidacy::Eligible,
                hears: vec![],
                member_ids: vec!["a".into(), "b".into(), "c".into()],
                flapped: false,
                unhealthy: false,
            }
        }

        fn heartbeat(&mut self, from: &str, term: u64) -> Message {
            let advert = self.advert();
            self.msg(
                from,
                term,
                Body::Heartbeat {
                    leader: from.into(),
                    timestamp: 0,
                    lease_ms: 2000,
                    advert,
                },
            )
        }
    }

    fn observer() -> Observed {
        let set = MemberSet::new("o", ["a", "b", "c"]).unwrap();
        Observed::new("o", "g", set, T)
    }

    #[test]
    fn a_heartbeat_names_the_leader_until_its_election_timeout_passes_unheard() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("a", 3);
        let t = o.on_message(w.at(0), &hb);
        assert_eq!(t.len(), 1, "one change: nobody to a, in term 3: {t:?}");
        assert_eq!((t[0].term, t[0].leader.as_deref()), (3, Some("a")));
        assert_eq!(t[0].reason, Reason::Elected);
        assert_eq!(o.leader_at(w.at(2999)), Some("a"));
        assert_eq!(o.leader_at(w.at(3000)), None, "unheard for T");
        let hb = w.heartbeat("a", 3);
        assert!(
            o.on_message(w.at(2000), &hb).is_empty(),
            "the same leader again"
        );
        assert_eq!(o.deadline(), Some(w.at(5000)));
        assert_eq!(o.on_time(w.at(4999)), None);
        let gone = o.on_time(w.at(5000)).expect("timed out");
        assert_eq!((gone.leader, gone.reason), (None, Reason::LeaderTimeout));
        let v = o.view();
        assert_eq!(
            (v.role, v.term, v.can_vote, v.eligible),
            (Role::Follower, 3, false, false)
        );
    }

    #[test]
    fn a_resign_ends_the_leader_and_its_late_heartbeats_of_that_term_are_stale() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("a", 3);
        o.on_message(w.at(0), &hb);
        let resign = w.msg(
            "a",
            3,
            Body::Resign {
                leader: "a".into(),
                successor: Some("b".into()),
                lost_quorum: false,
            },
        );
        let t = o.on_message(w.at(10), &resign);
        assert_eq!(t[0].reason, Reason::Transfer);
        assert_eq!(o.leader_at(w.at(10)), None);
        let late = w.heartbeat("a", 3);
        assert!(
            o.on_message(w.at(20), &late).is_empty(),
            "overtaken by its resign"
        );
        let next = w.heartbeat("b", 4);
        let t = o.on_message(w.at(30), &next);
        assert_eq!(t.last().and_then(|t| t.leader.as_deref()), Some("b"));
        assert_eq!(o.term(), 4);
    }

    #[test]
    fn terms_never_go_back_and_a_request_or_pre_vote_moves_nothing() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("b", 5);
        o.on_message(w.at(0), &hb);
        let old = w.heartbeat("a", 4);
        assert!(o.on_message(w.at(10), &old).is_empty());
        assert_eq!(o.leader_at(w.at(10)), Some("b"));
        for pre_vote in [true, false] {
            let ask = w.msg(
                "c",
                6,
                Body::Election {
                    candidate: "c".into(),
                    priority: 9,
                    pre_vote,
                },
            );
            assert!(o.on_message(w.at(20), &ask).is_empty());
        }
        assert_eq!((o.term(), o.leader_at(w.at(20))), (5, Some("b")));
        // An ack in a higher term shows the cluster moved on: b no longer counts.
        let advert = w.advert();
        let ack = w.msg(
            "a",
            6,
            Body::Ack {
                leader: "c".into(),
                hb_seq: 1,
                guard_ms: Some(3000),
                advert,
            },
        );
        let t = o.on_message(w.at(30), &ack);
        assert_eq!(t[0].reason, Reason::HigherTerm);
        assert_eq!(o.leader_at(w.at(30)), None);
    }

    #[test]
    fn strays_other_groups_and_other_observers_change_nothing() {
        let mut w = Wire::new();
        let mut o = observer();
        let stray = w.heartbeat("x", 9);
        assert!(o.on_message(w.at(0), &stray).is_empty());
        let mut other_group = w.heartbeat("a", 9);
        other_group.group = "h".into();
        assert!(o.on_message(w.at(0), &other_group).is_empty());
        let mut announce = w.heartbeat("a", 9);
        announce.observer = true;
        assert!(o.on_message(w.at(0), &announce).is_empty());
        assert_eq!((o.term(), o.leader_at(w.at(0))), (0, None));
    }

    #[test]
    fn a_members_report_counts_for_the_fallback_and_a_lagging_member_is_not_believed() {
        let w = Wire::new();
        let mut o = observer();
        let t = o.on_report(w.at(0), "b", Some("a"), 7);
        assert_eq!(t.last().and_then(|t| t.leader.as_deref()), Some("a"));
        assert!(
            o.on_report(w.at(1000), "b", Some("a"), 7).is_empty(),
            "a keep-alive"
        );
        assert_eq!(o.deadline(), Some(w.at(1000) + T));
        assert!(
            o.on_report(w.at(1100), "c", Some("c"), 6).is_empty(),
            "lagging"
        );
        assert_eq!(o.leader_at(w.at(1100)), Some("a"));
        let none = o.on_report(w.at(1200), "b", None, 7);
        assert_eq!(none[0].reason, Reason::LeaderTimeout);
        assert_eq!(o.leader_at(w.at(1200)), None);
        let members = o.members(w.at(1200));
        let b = members.iter().find(|m| m.id == "b").unwrap();
        assert!(b.live && !b.viable && !b.two_way);
    }

    fn vote(w: &mut Wire, from: &str, term: u64, pre_vote: bool, granted: bool) -> Message {
        w.msg(
            from,
            term,
            Body::Vote {
                candidate: "c".into(),
                granted,
                pre_vote,
                guard_ms: None,
            },
        )
    }

    #[test]
    fn only_a_granted_real_vote_shows_a_higher_term() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("a", 3);
        o.on_message(w.at(0), &hb);
        for (pre_vote, granted) in [(true, true), (true, false), (false, false)] {
            let v = vote(&mut w, "b", 4, pre_vote, granted);
            assert!(
                o.on_message(w.at(10), &v).is_empty(),
                "{pre_vote} {granted}"
            );
            assert_eq!((o.term(), o.leader_at(w.at(10))), (3, Some("a")));
        }
        let v = vote(&mut w, "b", 4, false, true);
        let t = o.on_message(w.at(20), &v);
        assert_eq!(t[0].reason, Reason::HigherTerm);
        assert_eq!((o.term(), o.leader_at(w.at(20))), (4, None));
    }

    #[test]
    fn one_leader_a_term_until_it_goes_unheard_and_the_same_one_keeps_its_start() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("a", 3);
        o.on_message(w.at(0), &hb);
        let again = w.heartbeat("a", 3);
        assert!(o.on_message(w.at(1000), &again).is_empty());
        let v = o.view();
        assert_eq!(
            v.leader_since,
            Some(w.at(0)),
            "the same leader since its first word"
        );
        assert_eq!(v.leader_heard_at, Some(w.at(1000)));
        assert_eq!(v.leader_until, Some(w.at(1000) + T));
        // Another in the same term while a counts: an impostor.
        let impostor = w.heartbeat("b", 3);
        assert!(o.on_message(w.at(2000), &impostor).is_empty());
        assert!(o.on_message(w.at(3999), &impostor).is_empty());
        assert_eq!(o.leader_at(w.at(3999)), Some("a"));
        // Once a has gone unheard for its time, b is the leader of that term.
        let b = w.heartbeat("b", 3);
        let t = o.on_message(w.at(4000), &b);
        assert_eq!(t.last().and_then(|t| t.leader.as_deref()), Some("b"));
        assert_eq!(o.leader_at(w.at(4000)), Some("b"));
        assert_eq!(o.view().leader_since, Some(w.at(4000)));
    }

    #[test]
    fn an_older_terms_leader_is_never_named_even_when_none_counts() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("b", 5);
        o.on_message(w.at(0), &hb);
        assert!(o.on_time(w.at(T.as_millis() as u64)).is_some());
        let old = w.heartbeat("a", 4);
        assert!(o.on_message(w.at(4000), &old).is_empty());
        assert_eq!((o.term(), o.leader_at(w.at(4000))), (5, None));
    }

    #[test]
    fn only_the_leaders_own_resign_ends_it() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("a", 3);
        o.on_message(w.at(0), &hb);
        let other = w.msg(
            "c",
            3,
            Body::Resign {
                leader: "c".into(),
                successor: None,
                lost_quorum: false,
            },
        );
        assert!(o.on_message(w.at(10), &other).is_empty());
        assert_eq!(o.leader_at(w.at(10)), Some("a"));
        let own = w.msg(
            "a",
            3,
            Body::Resign {
                leader: "a".into(),
                successor: None,
                lost_quorum: false,
            },
        );
        assert_eq!(o.on_message(w.at(20), &own)[0].reason, Reason::StepDown);
    }

    #[test]
    fn members_show_what_each_said_last_and_live_within_its_time() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("a", 3);
        o.on_message(w.at(0), &hb);
        let mut b = w.heartbeat("b", 3);
        if let Body::Heartbeat { advert, .. } = &mut b.body {
            advert.priority = 7;
            advert.unhealthy = true;
        }
        let b_seq = b.seq;
        o.on_message(w.at(100), &b);
        let t0 = w.at(0);
        let find = |o: &Observed, id: &str, at: u64| {
            o.members(t0 + Duration::from_millis(at))
                .into_iter()
                .find(|m| m.id == id)
                .expect("a member")
        };
        let a = find(&o, "a", 100);
        assert_eq!(
            (a.priority, a.candidacy, a.healthy, a.live),
            (5, Some(Candidacy::Eligible), Some(true), true)
        );
        assert_eq!(a.fingerprint.as_deref(), Some(w.set.fingerprint()));
        assert_eq!(a.last_seen, Some(w.at(0)));
        assert!(a.timings.is_some() && a.speaks.is_some());
        let b = find(&o, "b", 100);
        assert_eq!((b.priority, b.healthy), (7, Some(false)));
        // An older message of b's changes nothing it said; one of the same number does.
        let mut older = w.heartbeat("b", 3);
        older.seq = b_seq - 1;
        o.on_message(w.at(200), &older);
        assert_eq!(find(&o, "b", 200).priority, 7);
        let mut same = w.heartbeat("b", 3);
        same.seq = b_seq;
        o.on_message(w.at(300), &same);
        assert_eq!(find(&o, "b", 300).priority, 5);
        // Live within each one's own election timeout, not at its end.
        assert_eq!(o.members_live(w.at(2999)), 2);
        assert_eq!(o.members_live(w.at(3100)), 1, "a's time is over");
        assert!(!find(&o, "a", 3000).live);
        assert_eq!(o.members_live(w.at(3300)), 0);
        let c = find(&o, "c", 0);
        assert!(!c.live && c.fingerprint.is_none() && c.last_seen.is_none());
    }

    /// The announcement reads as a whole message of the observer's group and term, withdrawn
    /// and marked observer; another observer, like a member's core, takes nothing from it,
    /// whatever term it names.
    #[test]
    fn an_announcement_is_a_withdrawn_presence_marked_observer_that_names_nobody() {
        let mut w = Wire::new();
        let mut o = observer();
        let hb = w.heartbeat("a", 4);
        o.on_message(w.at(0), &hb);
        let timings = Timings::default();
        let m = o.announcement(77, &timings);
        let back = Message::parse(m.to_json().as_bytes()).expect("a whole message");
        assert_eq!(back, m);
        assert!(m.observer);
        assert_eq!((m.group.as_str(), m.from.as_str()), ("g", "o"));
        assert_eq!(
            (m.term, m.seq),
            (4, 77),
            "the term it knows, the number given"
        );
        assert_eq!(m.members, o.members.fingerprint());
        assert_eq!(m.timings, Some(Announced::of(&timings)));
        let advert = m.body.advert().expect("a presence");
        assert_eq!(advert.candidacy, Candidacy::Withdrawn);
        assert!(advert.hears.is_empty());
        assert!(advert
            .member_ids
            .iter()
            .map(String::as_str)
            .eq(o.members.ids()));
        assert!(advert.member_ids.len() >= 3, "{:?}", advert.member_ids);
        let mut other = observer();
        let higher = Message { term: 9, ..m };
        assert!(other.on_message(w.at(0), &higher).is_empty());
        assert_eq!(other.term(), 0, "an observer's word raises no term");
    }
}
