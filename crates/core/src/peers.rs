//! What one node knows about the other members: when each was last heard, what it last
//! advertised, and whether the link to it is proven both ways (docs/protocol.md, rule 11).
//!
//! Ranking decisions (who may veto a lower-ranked candidate, who a leader hands over to, how
//! long a node staggers its campaign) only trust members that could actually win an election:
//! heard recently, hearing this node (their own advertisement lists it), hearing a quorum, and
//! agreeing on the member set. A node that can send but not receive therefore stops counting
//! within `T` of going deaf, instead of blocking every lower-ranked candidate forever.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::interface::Member;
use super::membership::MemberSet;
use super::message::{Advert, Announced, Candidacy, Message, Versions};
use super::rank::Rank;

/// How many losses of eligibility are remembered per member (rule 12).
const FLAPS_REMEMBERED: usize = 8;
/// Flap damping (rule 12): a member that lost its eligibility ranks below the steady ones for
/// this many preemption waits (or of its own election timeout, if that is longer).
pub(crate) const FLAP_WINDOW: u32 = 10;

/// One other member, as heard.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) id: String,
    pub(crate) priority: u32,
    /// Latest advertised candidacy; `None` until the first advertisement.
    pub(crate) candidacy: Option<Candidacy>,
    pub(crate) fingerprint: Option<String>,
    pub(crate) last_seen: Option<Instant>,
    /// The members its latest advertisement says it heard within `T`.
    hears: BTreeSet<String>,
    /// The ids by which its member set (from its latest advertisement) differs from ours.
    difference: Vec<String>,
    /// Sequence number of the advertisement the fields above come from: an older one that
    /// arrives late (messages overtake each other) must not undo a newer one.
    advert_seq: Option<u64>,
    /// Since when it has advertised `eligible` without a silence of `T`.
    pub(crate) eligible_since: Option<Instant>,
    /// When it lost eligibility it had held, most recent last (rule 12).
    flaps: VecDeque<Instant>,
    /// Its latest advertisement says it counts itself as flapped (rule 12).
    says_flapped: bool,
    /// Its latest advertisement says its application is unhealthy (rule 17).
    pub(crate) says_unhealthy: bool,
    /// It was seen to lose its health in its current run: its recovery is a flap too (rule 17).
    lost_health: bool,
    /// It may have taken a silence of ours for a flap: its latest advertisement heard other
    /// members but not us, or we heard nobody at all for a while (rule 12). Settled by its next
    /// advertisement: one that hears us again means it may count us as flapped now.
    may_have_missed_us: bool,
    /// Since when we have heard it without a silence of its window: for that long, what its
    /// advertisements say of its hearing is not a view it is still catching up on.
    heard_since: Option<Instant>,
    /// The protocol versions its latest message says it speaks (rule 15); `None` until heard.
    pub(crate) speaks: Option<Versions>,
    /// `seq` of the newest message heard from it, which `speaks`, `announced` and its
    /// liveness come from: a message of an earlier run that arrives late must not undo what a
    /// later run said, and an old message keeps nobody live.
    about_seq: Option<u64>,
    /// The timings its latest message announced; `None` from a version-2 sender.
    pub(crate) announced: Option<Announced>,
}

impl Peer {
    /// Ends a stretch of eligibility, remembering it as a flap if it was one.
    fn lose_eligibility(&mut self, now: Instant, flap: bool) {
        if self.eligible_since.take().is_some() && flap {
            self.record_flap(now);
        }
    }

    fn record_flap(&mut self, now: Instant) {
        self.flaps.push_back(now);
        if self.flaps.len() > FLAPS_REMEMBERED {
            self.flaps.pop_front();
        }
    }
}

/// A member's place in ranking decisions: members whose application is unhealthy rank below
/// every healthy one (rule 17); then members that lost their eligibility within the flap window
/// rank below every member that did not (rule 12); then [`Rank`]. A node that crashes and comes
/// back again and again therefore stops winning elections and being handed leadership, and a
/// connected quorum keeps a leader whatever it does; a node whose application fails leads only
/// when no healthy member can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Standing<'a> {
    pub(crate) healthy: bool,
    pub(crate) steady: bool,
    pub(crate) rank: Rank<'a>,
}

impl Standing<'_> {
    pub(crate) fn outranks(&self, other: &Standing<'_>) -> bool {
        (self.healthy, self.steady, self.rank) > (other.healthy, other.steady, other.rank)
    }
}

/// How long after its last message member `p` still counts as live for a node whose own
/// election timeout is `own` (see [`Peers::window`]).
fn window(own: Duration, p: &Peer) -> Duration {
    p.announced.map_or(own, |a| own.max(a.election_timeout()))
}

/// The table of every other member.
#[derive(Debug, Clone)]
pub(crate) struct Peers {
    own_id: String,
    members: MemberSet,
    timeout: Duration,
    /// How long a loss of eligibility keeps a member below the steady ones.
    flap_window: Duration,
    table: BTreeMap<String, Peer>,
    /// When a member was last heard, any member.
    last_heard: Option<Instant>,
    /// The latest stretch of at least twice our `T` in which no member was heard: this node was
    /// cut off (or paused), so the silence was its own, not its peers' (rule 12).
    heard_nobody: Option<(Instant, Instant)>,
}

impl Peers {
    pub(crate) fn new(
        own_id: &str,
        members: &MemberSet,
        timeout: Duration,
        flap_window: Duration,
    ) -> Peers {
        let table = members
            .ids()
            .filter(|id| *id != own_id)
            .map(|id| {
                (
                    id.to_string(),
                    Peer {
                        id: id.to_string(),
                        priority: 0,
                        candidacy: None,
                        fingerprint: None,
                        last_seen: None,
                        hears: BTreeSet::new(),
                        difference: Vec::new(),
                        advert_seq: None,
                        eligible_since: None,
                        flaps: VecDeque::new(),
                        says_flapped: false,
                        says_unhealthy: false,
                        lost_health: false,
                        may_have_missed_us: false,
                        heard_since: None,
                        speaks: None,
                        about_seq: None,
                        announced: None,
                    },
                )
            })
            .collect();
        Peers {
            own_id: own_id.to_string(),
            members: members.clone(),
            timeout,
            flap_window,
            table,
            last_heard: None,
            heard_nobody: None,
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Peer> {
        self.table.get(id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Peer> {
        self.table.values()
    }

    /// How long after its last message a member still counts as live: our `T`, or its own if
    /// that is longer (a node sends something at least every `2h`, always below its `T`).
    fn window(&self, p: &Peer) -> Duration {
        window(self.timeout, p)
    }

    /// Records a message from member `m.from` (the caller has checked membership). Returns
    /// whether that member may now count this node as flapped for a silence it kept (rule 12),
    /// which this node cannot otherwise know: it then counts itself as flapped and says so.
    pub(crate) fn heard(&mut self, now: Instant, m: &Message) -> bool {
        let own_timeout = self.timeout;
        let difference = m.body.advert().map(|a| {
            // Nearly always the same set as ours, in the same (sorted) order: nothing to build.
            if a.member_ids
                .iter()
                .map(String::as_str)
                .eq(self.members.ids())
            {
                return Vec::new();
            }
            let theirs: BTreeSet<String> = a.member_ids.iter().cloned().collect();
            self.members
                .difference(&theirs)
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<String>>()
        });
        let Some(about_seq) = self.table.get(&m.from).map(|p| p.about_seq) else {
            return false;
        };
        let fresh = about_seq.is_none_or(|s| m.seq > s);
        // Old news: a message no newer than one already heard from the member (TCP handing
        // over, seconds late, what it sent into a partition) says nothing of whether it is live
        // now, nor of a silence. Counted, it kept a deaf ex-leader live, so the vetoes cast for
        // it held the failover back for another T (issue 39, item 2). Sequence numbers only
        // grow, across restarts too (the boot counter is their high half).
        if fresh {
            if let Some(last) = self.last_heard.filter(|l| now >= *l + own_timeout * 2) {
                self.heard_nobody = Some((last, now));
                // Whoever heard the others meanwhile saw us silent as long (rule 12), and
                // counts it once it lasts twice its window for us, which may be longer than
                // our own `T`.
                for q in self.table.values_mut() {
                    if now >= last + window(own_timeout, q) * 2 {
                        q.may_have_missed_us = true;
                    }
                }
            }
            self.last_heard = Some(now);
        }
        let Some(p) = self.table.get_mut(&m.from) else {
            return false;
        };
        let heard_nobody = self.heard_nobody;
        let timeout = window(own_timeout, p);
        // Silent for twice its window: a node that is merely slow to send (it announces itself
        // every `2h`, under its `T`, but on a clock that may run slower than ours) is no flap
        // (simulator seed 8035: r = 20 %, T = 2.6h, every node took the best one for a flapper
        // and vetoed it, so the cluster stayed leaderless). A restart is seen sooner, by its
        // `booting` advert.
        // Rule 12: the part of its silence in which this node heard nobody at all is not counted:
        // that silence was ours. A node cut off from every member for a while would otherwise
        // take each of them, back, for a flapper, while they count it as the flapper: every
        // node would rank itself first and veto the others for T (issue 39, item 2).
        let silent = fresh
            && p.last_seen.is_none_or(|s| {
                let ours = heard_nobody.map_or(Duration::ZERO, |(from, to)| {
                    to.min(now).saturating_duration_since(from.max(s))
                });
                now.saturating_duration_since(s).saturating_sub(ours) >= timeout * 2
            });
        let back = p.last_seen.is_none_or(|s| now >= s + timeout);
        if fresh {
            p.last_seen = Some(now);
            if back {
                p.heard_since = Some(now);
            }
            // What it speaks and runs on goes with the process: any message says it, and one
            // from a restarted node may say something else (an upgrade, a timing change).
            p.about_seq = Some(m.seq);
            p.speaks = Some(m.speaks.unwrap_or(Versions::only(m.v)));
            p.announced = m.timings;
        }
        if p.fingerprint.as_deref() != Some(m.members.as_str()) {
            p.fingerprint = Some(m.members.clone());
        }
        let newer = p.advert_seq.is_none_or(|s| m.seq > s);
        let (mut lost_health, mut health_back) = (false, false);
        let mut missed_us = false;
        if let (true, Some(a)) = (newer, m.body.advert()) {
            let Advert {
                priority,
                candidacy,
                hears,
                flapped,
                unhealthy,
                ..
            } = a;
            // Rule 17: losing health is a flap, and so is the recovery that follows it, so the
            // flap window runs from when it is healthy again. Its first advert is neither: a
            // node that starts before its application is up has lost nothing.
            if p.advert_seq.is_some() && *unhealthy != p.says_unhealthy {
                lost_health = *unhealthy;
                health_back = !*unhealthy && p.lost_health;
            }
            if lost_health {
                p.lost_health = true;
            }
            p.says_unhealthy = *unhealthy;
            p.says_flapped = *flapped;
            // Rule 12: a member that hears others but not us counts our silence against us
            // once it lasts twice its window, while we, hearing it all along (a link that
            // drops only what we send), have no flap to count. Ranked steady by ourselves and
            // flapped by it, we and a rival it ranks first each took ourselves for the best,
            // campaigned at the same instant and split the votes round after round (simulator
            // seed 6456). So when it hears us again after such a stretch, we count ourselves
            // as flapped, and say so: too often is harmless (the others take our word), too
            // rarely is what split the votes. A booting member is a new run that counted
            // nothing of ours; one that hears nobody else took the silence for its own; one
            // heard again for less than its window may still be catching up after a silence
            // of its own (it hears some members before the others).
            let hears_others = hears.iter().any(|h| *h != self.own_id && *h != p.id);
            let settled = p.heard_since.is_some_and(|s| now >= s + timeout);
            if *candidacy == Candidacy::Booting {
                p.may_have_missed_us = false;
            } else if hears_others {
                if !hears.contains(&self.own_id) && settled {
                    p.may_have_missed_us = true;
                } else if std::mem::take(&mut p.may_have_missed_us) {
                    missed_us = true;
                }
            }
            p.advert_seq = Some(m.seq);
            p.priority = *priority;
            p.candidacy = Some(*candidacy);
            // The same list as last time (sorted, as a set is sent) is the same set.
            if !p.hears.iter().eq(hears.iter()) {
                p.hears = hears.iter().cloned().collect();
            }
            p.difference = difference.unwrap_or_default();
        } else if let super::message::Body::Election { priority, .. } = &m.body {
            p.priority = *priority;
        }
        // Eligible for preemption and handover: a candidate, and healthy (rule 17).
        let eligible = p.candidacy == Some(Candidacy::Eligible) && !p.says_unhealthy;
        // Gone silent for T, back from a restart, or its application failed: a flap. Cooling
        // after a resign, a withdrawn candidacy or a stop end eligibility without one.
        let restarted = p.candidacy == Some(Candidacy::Booting);
        if restarted {
            // A new run: whatever it lost before is its previous run's.
            p.lost_health = false;
        }
        if silent || restarted || lost_health {
            p.lose_eligibility(now, true);
        } else if !eligible {
            p.lose_eligibility(now, false);
        }
        if health_back {
            p.record_flap(now);
        }
        if eligible {
            p.eligible_since.get_or_insert(now);
        }
        missed_us
    }

    /// Forgets eligibility of a member that just resigned (it cools down); a resign because it
    /// lost its quorum counts as a flap.
    pub(crate) fn resigned(&mut self, now: Instant, id: &str, lost_quorum: bool) {
        if let Some(p) = self.table.get_mut(id) {
            p.candidacy = Some(Candidacy::Cooling);
            p.lose_eligibility(now, lost_quorum);
        }
    }

    /// Heard within its window (our `T`, or its own if longer).
    pub(crate) fn live(&self, p: &Peer, now: Instant) -> bool {
        self.live_until(p).is_some_and(|u| now < u)
    }

    /// When it stops counting as live unless heard again; `None` if never heard.
    pub(crate) fn live_until(&self, p: &Peer) -> Option<Instant> {
        p.last_seen.map(|s| s + self.window(p))
    }

    /// Live, and its latest advertisement says it hears us.
    pub(crate) fn two_way(&self, p: &Peer, now: Instant) -> bool {
        self.live(p, now) && p.hears.contains(&self.own_id)
    }

    /// Could win an election if it is live: its latest advertisement says it hears us and a
    /// quorum of our members (itself counted), and it has our member set.
    pub(crate) fn could_win(&self, p: &Peer) -> bool {
        let heard = p
            .hears
            .iter()
            .filter(|h| self.members.contains(h) && **h != p.id)
            .count();
        p.hears.contains(&self.own_id)
            && heard + 1 >= self.members.quorum()
            && p.fingerprint.as_deref() == Some(self.members.fingerprint())
    }

    /// Live and could win an election.
    pub(crate) fn viable(&self, p: &Peer, now: Instant) -> bool {
        self.live(p, now) && self.could_win(p)
    }

    /// The ids by which its member set differs from ours (empty when equal or unknown).
    pub(crate) fn difference<'a>(&self, p: &'a Peer) -> &'a [String] {
        &p.difference
    }

    /// Live members whose member set differs from ours by more than one id. Quorums of two
    /// sets intersect only when the sets differ by at most one member, so while such a member
    /// is heard this node neither votes nor campaigns (rule 1): no leader rather than two.
    pub(crate) fn conflicts(&self, now: Instant) -> Vec<String> {
        self.table
            .values()
            .filter(|p| self.live(p, now) && self.difference(p).len() > 1)
            .map(|p| p.id.clone())
            .collect()
    }

    /// Until when a member more than one id away counts as live (see [`Peers::conflicts`]).
    pub(crate) fn conflict_until(&self) -> Option<Instant> {
        self.table
            .values()
            .filter(|p| self.difference(p).len() > 1)
            .filter_map(|p| self.live_until(p))
            .max()
    }

    /// Members heard within `T`, for our own advertisement.
    pub(crate) fn hearing(&self, now: Instant) -> Vec<String> {
        self.table
            .values()
            .filter(|p| self.live(p, now))
            .map(|p| p.id.clone())
            .collect()
    }

    /// Whether `p` lost its eligibility within the flap window, as seen from here or as it
    /// says itself (rule 12). The window is ours or ten of its own election timeouts, whichever
    /// is longer: a node with a long `T` costs the others that long each time it fails as
    /// leader (they keep their promise to it, rule 5), so a node with a short `T` must not forget
    /// its flaps sooner than the flapper itself does (simulator seed 1580: a 50 s node that
    /// crash-looped was elected again after every restart by nodes with 4 s windows).
    pub(crate) fn flapped(&self, p: &Peer, now: Instant) -> bool {
        let window = p.announced.map_or(self.flap_window, |a| {
            self.flap_window.max(a.election_timeout() * FLAP_WINDOW)
        });
        p.says_flapped || p.flaps.iter().any(|f| now < *f + window)
    }

    pub(crate) fn rank<'a>(&self, p: &'a Peer) -> Rank<'a> {
        Rank::new(p.priority, &p.id)
    }

    pub(crate) fn standing<'a>(&self, p: &'a Peer, now: Instant) -> Standing<'a> {
        Standing {
            healthy: !p.says_unhealthy,
            steady: !self.flapped(p, now),
            rank: self.rank(p),
        }
    }

    /// The member as the API shows it.
    pub(crate) fn describe(&self, p: &Peer, now: Instant) -> Member {
        Member {
            id: p.id.clone(),
            priority: p.priority,
            candidacy: p.candidacy,
            fingerprint: p.fingerprint.clone(),
            last_seen: p.last_seen,
            live: self.live(p, now),
            two_way: self.two_way(p, now),
            viable: self.viable(p, now),
            member_difference: p.difference.clone(),
            timings: p.announced,
            speaks: p.speaks,
            healthy: p.candidacy.map(|_| !p.says_unhealthy),
            eligible_since: p.eligible_since,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::message::{Body, Message};
    use super::super::timings::Timings;
    use super::*;

    const IDS: [&str; 5] = ["a", "b", "c", "d", "e"];

    fn five() -> (MemberSet, Peers) {
        let set = MemberSet::new("a", IDS).expect("valid");
        let t = Timings::default();
        let peers = Peers::new("a", &set, t.election_timeout, t.election_timeout * 10);
        (set, peers)
    }

    /// A presence of `from` with our member set (unless `members` says otherwise), hearing
    /// `hears`.
    fn presence(set: &MemberSet, from: &str, seq: u64, hears: &[&str]) -> Message {
        presence_as(set, from, seq, hears, Candidacy::Eligible)
    }

    fn presence_as(
        set: &MemberSet,
        from: &str,
        seq: u64,
        hears: &[&str],
        candidacy: Candidacy,
    ) -> Message {
        Message {
            term: 1,
            seq,
            members: set.fingerprint().to_string(),
            timings: Some(Announced::of(&Timings::default())),
            ..Message::new(
                "g".into(),
                from.into(),
                Body::Presence {
                    advert: Advert {
                        priority: 9,
                        candidacy,
                        hears: hears.iter().map(|s| s.to_string()).collect(),
                        member_ids: IDS.iter().map(|s| s.to_string()).collect(),
                        flapped: false,
                        unhealthy: false,
                    },
                },
            )
        }
    }

    fn origin() -> Instant {
        #[allow(clippy::disallowed_methods)]
        Instant::now()
    }

    #[test]
    fn a_member_is_live_until_exactly_its_window_after_it_was_heard() {
        let (set, mut peers) = five();
        let t0 = origin();
        peers.heard(t0, &presence(&set, "c", 1, &["a", "b", "d"]));
        let c = peers.get("c").expect("a member");
        let t = Timings::default().election_timeout;
        assert!(peers.live(c, t0 + t - Duration::from_nanos(1)));
        assert!(!peers.live(c, t0 + t), "the window's end is outside it");
    }

    #[test]
    fn a_flap_ranks_a_member_down_until_exactly_the_flap_window_after_it() {
        let (set, mut peers) = five();
        let t0 = origin();
        let t = Timings::default().election_timeout;
        peers.heard(t0, &presence(&set, "c", 1, &["a", "b"]));
        // Silent for twice its T while b was heard, then heard again: it went away, a flap.
        peers.heard(t0 + t, &presence(&set, "b", 1, &["a", "c"]));
        let back = t0 + t * 2;
        peers.heard(back, &presence(&set, "c", 2, &["a", "b"]));
        let c = peers.get("c").expect("a member");
        let window = t * FLAP_WINDOW;
        assert!(peers.flapped(c, back + window - Duration::from_nanos(1)));
        assert!(
            !peers.flapped(c, back + window),
            "the window's end is outside it"
        );
    }

    /// Rule 12 (simulator seed 6456): a member that hears others but not us counts our silence
    /// as a flap, and we cannot see that silence (only what we send was lost). Its adverts can:
    /// once they left us out, the first that hears us again says it may now count us as
    /// flapped. Not when it was catching up after a silence of its own, not from a new run of
    /// it (booting), not when it heard nobody else; and after we heard nobody ourselves, yes.
    #[test]
    fn a_member_that_heard_others_but_not_us_may_count_us_as_flapped() {
        let (set, _) = five();
        let t = Timings::default().election_timeout;
        let h = Timings::default().heartbeat;
        let t0 = origin();
        let mut seq = 0;
        let mut say = |peers: &mut Peers, at: Instant, hears: &[&str], c: Candidacy| {
            seq += 1;
            peers.heard(at, &presence_as(&set, "b", seq, hears, c))
        };
        let eligible = Candidacy::Eligible;
        // Heard every h: for T it hears us (so it is settled), then for 2T it does not.
        type Say<'s> = dyn FnMut(&mut Peers, Instant, &[&str], Candidacy) -> bool + 's;
        let steady = |peers: &mut Peers, say: &mut Say<'_>, from: Instant| {
            let mut at = from;
            while at < from + t {
                assert!(!say(peers, at, &["a", "c"], eligible), "it hears us");
                at += h;
            }
            while at < from + t * 3 {
                assert!(!say(peers, at, &["c"], eligible), "not yet known");
                at += h;
            }
            at
        };
        let (_, mut peers) = five();
        let at = steady(&mut peers, &mut say, t0);
        assert!(
            !say(&mut peers, at, &["a"], eligible),
            "hearing us alone, it says nothing of a silence among the others"
        );
        assert!(
            say(&mut peers, at, &["a", "c"], eligible),
            "it hears us again"
        );
        assert!(!say(&mut peers, at + h, &["a", "c"], eligible), "said once");

        // A new run of it counted nothing of ours.
        let (_, mut peers) = five();
        let at = steady(&mut peers, &mut say, t0);
        assert!(!say(&mut peers, at, &["c"], Candidacy::Booting));
        assert!(
            !say(&mut peers, at + h, &["a", "c"], eligible),
            "after booting"
        );

        // Hearing nobody else, it took the silence for its own.
        let (_, mut peers) = five();
        let mut at = t0;
        while at < t0 + t {
            assert!(!say(&mut peers, at, &["a", "c"], eligible));
            at += h;
        }
        assert!(!say(&mut peers, at, &[], eligible));
        assert!(
            !say(&mut peers, at + h, &["a"], eligible),
            "it heard nobody else"
        );

        // Back after a silence of its own (c heard all along), it hears c before us: that is
        // no view of us yet.
        let (_, mut peers) = five();
        let mut at = t0;
        let mut c_seq = 0;
        while at < t0 + t * 4 {
            c_seq += 1;
            peers.heard(at, &presence(&set, "c", c_seq, &["a", "b"]));
            if at < t0 + t {
                assert!(!say(&mut peers, at, &["a", "c"], eligible));
            }
            at += h;
        }
        assert!(!say(&mut peers, at, &["c"], eligible), "catching up");
        assert!(!say(&mut peers, at + h, &["a", "c"], eligible), "caught up");

        // We heard nobody for 2T: whoever heard the others meanwhile may count it against us.
        let (_, mut peers) = five();
        assert!(!say(&mut peers, t0, &["a", "c"], eligible));
        assert!(
            say(&mut peers, t0 + t * 2, &["a", "c"], eligible),
            "our silence"
        );

        // Not when that stretch is shorter than twice its own window: a member with a longer
        // `T` counts a silence against us only after twice that (simulator seed 3081: a node
        // with a short `T` among slow senders heard nobody for 2T between any two of their
        // messages, took itself for flapped every time and never preempted as the best).
        let (_, mut peers) = five();
        let slow = Timings {
            election_timeout: t * 2,
            ..Timings::default()
        };
        let from_slow = |seq: u64| Message {
            timings: Some(Announced::of(&slow)),
            ..presence(&set, "d", seq, &["a", "c"])
        };
        peers.heard(t0, &from_slow(1));
        assert!(!peers.heard(t0 + t * 3, &from_slow(2)), "under 2 × its 2T");
        assert!(peers.heard(t0 + t * 8, &from_slow(3)), "beyond it");
    }

    /// Issue 39, item 2: a node cut off from every member takes none of them for a flapper when
    /// it hears them again (they take it for one), so that they all rank it alike; a member
    /// silent while others were heard still flapped, and so does one whose silence went on
    /// for twice its T beyond ours.
    #[test]
    fn a_silence_in_which_this_node_heard_nobody_is_no_flap_of_its_peers() {
        let (set, mut peers) = five();
        let t0 = origin();
        let t = Timings::default().election_timeout;
        for (id, seq) in [("b", 1), ("c", 1), ("d", 1)] {
            peers.heard(t0, &presence(&set, id, seq, &["a", "b", "c", "d"]));
        }
        // Cut off for ten T: nobody heard. Then b and c come back.
        let back = t0 + t * 10;
        peers.heard(back, &presence(&set, "b", 2, &["a", "c", "d"]));
        let later = back + Duration::from_millis(5);
        peers.heard(later, &presence(&set, "c", 2, &["a", "b", "d"]));
        for id in ["b", "c"] {
            let p = peers.get(id).expect("a member");
            assert!(
                !peers.flapped(p, later),
                "{id} is no flapper: the silence was ours"
            );
            assert!(peers.standing(p, later).steady, "{id}");
        }
        // d stays silent for twice its T after we hear again: that silence is its own.
        let d_back = back + t * 2;
        peers.heard(back + t, &presence(&set, "b", 3, &["a", "c"]));
        peers.heard(d_back, &presence(&set, "d", 2, &["a", "b", "c"]));
        let d = peers.get("d").expect("a member");
        assert!(
            peers.flapped(d, d_back),
            "d went away beyond our own silence"
        );
    }

    /// Issue 39, item 2: a message older than one already heard (TCP handing over, seconds
    /// late, what a member sent into a partition) keeps nobody live, and changes nothing of
    /// what its newer messages said.
    #[test]
    fn a_message_older_than_one_already_heard_is_old_news() {
        let (set, mut peers) = five();
        let t0 = origin();
        let t = Timings::default().election_timeout;
        peers.heard(t0, &presence(&set, "b", 5, &["a", "c"]));
        let late = t0 + t - Duration::from_millis(1);
        for seq in [4, 5] {
            peers.heard(late, &presence(&set, "b", seq, &["a", "c", "d"]));
        }
        let b = peers.get("b").expect("a member");
        assert_eq!(
            peers.live_until(b),
            Some(t0 + t),
            "live from its newest message only"
        );
        assert!(!peers.live(b, t0 + t));
        assert!(!b.hears.contains("d"), "an old advert undid a newer one");
        // A newer one counts at once.
        peers.heard(late, &presence(&set, "b", 6, &["a", "c", "d"]));
        let b = peers.get("b").expect("a member");
        assert!(peers.live(b, t0 + t));
        assert!(b.hears.contains("d"));
    }

    #[test]
    fn only_a_member_that_hears_us_and_a_quorum_of_other_members_could_win() {
        let (set, mut peers) = five();
        let t0 = origin();
        let mut seq = 0;
        let mut viable_with = |hears: &[&str]| {
            seq += 1;
            peers.heard(t0, &presence(&set, "c", seq, hears));
            let c = peers.get("c").expect("a member");
            peers.viable(c, t0)
        };
        // A quorum of 5 is 3: c itself and two others it hears, one of them us.
        assert!(viable_with(&["a", "b"]));
        assert!(!viable_with(&["a"]), "hears us, but no quorum");
        assert!(!viable_with(&["b", "d", "e"]), "a quorum, but not us");
        // Neither itself nor ids outside our member set count towards its quorum.
        assert!(!viable_with(&["a", "c", "x", "y"]));
    }
}
