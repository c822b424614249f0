//! Single handlers of the state machine, one rule at a time (docs/protocol.md numbers them).
//! The simulator checks that the rules together are safe; these check that each rule is what
//! the code does, including rules whose breach the simulator would only see as a slowdown.

use std::time::Duration;

use tokio::time::Instant;

use super::*;

const T: Duration = Duration::from_secs(3);
const H: Duration = Duration::from_millis(500);

fn set(ids: &[&str]) -> MemberSet {
    MemberSet::new(ids[0], ids.iter().copied()).unwrap()
}

fn node_at(id: &str, eligible: bool, persisted: Persistent, now: Instant) -> Node {
    Node::new(
        Config {
            node_id: id.into(),
            group: "g".into(),
            members: MemberSet::new(id, MEMBERS.iter().copied()).unwrap(),
            priority: 1,
            eligible,
            timings: Timings::default(),
        },
        persisted,
        now,
        7,
        1 << 32,
    )
}

/// A test cluster's clock and message numbering.
struct Bench {
    t0: Instant,
    seq: u64,
    fingerprint: String,
}

impl Bench {
    fn new(members: &[&str]) -> Bench {
        Bench {
            // Any instant will do: every time in a test is an offset from it.
            #[allow(clippy::disallowed_methods)]
            t0: Instant::now(),
            seq: 1,
            fingerprint: set(members).fingerprint().to_string(),
        }
    }

    fn at(&self, d: Duration) -> Instant {
        self.t0 + d
    }

    fn msg(&mut self, from: &str, term: u64, body: Body) -> Input {
        self.seq += 1;
        Input::Message(Message {
            v: PROTOCOL_VERSION,
            group: "g".into(),
            from: from.into(),
            term,
            seq: self.seq,
            ts: 0,
            members: self.fingerprint.clone(),
            body,
            kid: None,
            sig: None,
        })
    }

    fn presence(
        &mut self,
        from: &str,
        term: u64,
        priority: u32,
        c: Candidacy,
        hears: &[&str],
    ) -> Input {
        let members = self.members_of_fingerprint();
        self.msg(
            from,
            term,
            Body::Presence {
                priority,
                candidacy: c,
                hears: hears.iter().map(|s| s.to_string()).collect(),
                member_ids: members,
                flapped: false,
            },
        )
    }

    /// A heartbeat of leader `b` (priority 5, hearing a and c) in `term`.
    fn heartbeat_from_b(&mut self, term: u64) -> Input {
        let member_ids = self.members_of_fingerprint();
        self.msg(
            "b",
            term,
            Body::Heartbeat {
                leader: "b".into(),
                timestamp: 0,
                lease_ms: 2000,
                priority: 5,
                candidacy: Candidacy::Eligible,
                hears: vec!["a".into(), "c".into()],
                member_ids,
                flapped: false,
            },
        )
    }

    /// Leader `b`'s resign in `term`, naming `successor` if any.
    fn resign_from_b(&mut self, term: u64, successor: Option<&str>) -> Input {
        self.msg(
            "b",
            term,
            Body::Resign {
                leader: "b".into(),
                successor: successor.map(str::to_string),
                lost_quorum: false,
            },
        )
    }

    fn members_of_fingerprint(&self) -> Vec<String> {
        // Every test cluster here is a, b, c (and sometimes d).
        MEMBERS.iter().map(|s| s.to_string()).collect()
    }
}

const MEMBERS: [&str; 3] = ["a", "b", "c"];

fn drain(n: &mut Node) -> Vec<Action> {
    std::iter::from_fn(|| n.poll_action()).collect()
}

fn published(actions: &[Action]) -> Vec<&Body> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Publish(m) => Some(&m.body),
            _ => None,
        })
        .collect()
}

fn pre_vote(b: &mut Bench, candidate: &str, term: u64, priority: u32) -> Input {
    b.msg(
        candidate,
        term,
        Body::Election {
            candidate: candidate.into(),
            priority,
            pre_vote: true,
        },
    )
}

fn grants_pre_vote(actions: &[Action], candidate: &str) -> bool {
    published(actions).iter().any(|b| {
        matches!(b, Body::Vote { candidate: c, granted: true, pre_vote: true } if c == candidate)
    })
}

/// Node `a`, past its start-up guard, a voter that does not campaign itself (so that its own
/// rank never enters its answers).
fn voter(b: &mut Bench) -> Node {
    let mut a = node_at("a", false, Persistent::default(), b.t0);
    let _ = a.handle(b.at(T + H), Input::Tick);
    drain(&mut a);
    a
}

/// Node `a`, a voter that follows leader `b` of term 1 (so it guards b's lease); and when.
fn following_b(b: &mut Bench) -> (Node, Instant) {
    let mut a = voter(b);
    let now = b.at(T + H + H);
    let hb = b.heartbeat_from_b(1);
    let _ = a.handle(now, hb);
    drain(&mut a);
    (a, now)
}

/// Node `a`, a candidate: past its start-up guard, its election timer ran out, it asks for
/// pre-votes for term 1.
fn campaigning(b: &mut Bench) -> Node {
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let _ = a.handle(b.at(T + H), Input::Tick);
    assert_eq!(a.role(), Role::PreCandidate);
    drain(&mut a);
    a
}

fn grant(b: &mut Bench, term: u64, pre_vote: bool) -> Input {
    b.msg(
        "b",
        term,
        Body::Vote {
            candidate: "a".into(),
            granted: true,
            pre_vote,
        },
    )
}

#[test]
fn a_message_from_a_non_member_changes_nothing() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let before = a.view(b.at(T + H));
    let stray = b.presence("x", 40, 9, Candidacy::Eligible, &["a"]);
    assert_eq!(a.handle(b.at(T + H), stray), Ok(Outcome::NotMember));
    assert!(drain(&mut a).is_empty());
    assert_eq!(a.view(b.at(T + H)), before, "not even the term moved");
    assert!(a.peers(b.at(T + H)).iter().all(|m| m.id != "x"));
}

#[test]
fn votes_and_acks_from_another_member_set_are_not_counted() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = campaigning(&mut b);
    let now = b.at(T + H);
    let mut other = Bench::new(&["a", "b", "c", "d"]);
    other.seq = 100;
    assert_eq!(
        a.handle(now, grant(&mut other, 1, true)),
        Ok(Outcome::OtherMembers)
    );
    assert_eq!(a.role(), Role::PreCandidate, "not counted");
    assert_eq!(a.handle(now, grant(&mut b, 1, true)), Ok(Outcome::Accepted));
    assert_eq!(a.role(), Role::Candidate, "counted with the same set");
}

/// Makes `a` leader of a, b, c through b's grants.
fn leader(b: &mut Bench) -> Node {
    let mut a = campaigning(b);
    let now = b.at(T + H);
    let _ = a.handle(now, grant(b, 1, true));
    let _ = a.handle(now, grant(b, 1, false));
    assert_eq!(a.role(), Role::Leader);
    drain(&mut a);
    a
}

#[test]
fn a_leader_steps_down_at_once_for_a_higher_term() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let now = b.at(T + H + Duration::from_millis(10));
    let higher = b.presence("c", a.term() + 3, 2, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now, higher);
    let v = a.view(now);
    assert_eq!(v.role, Role::Follower);
    assert!(!v.is_leader_at(now));
    assert_eq!(v.term, 4);
}

#[test]
fn a_granted_vote_is_on_disk_before_it_leaves() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    let _ = a.handle(now, pre_vote(&mut b, "c", 1, 9));
    let election = b.msg(
        "c",
        1,
        Body::Election {
            candidate: "c".into(),
            priority: 9,
            pre_vote: false,
        },
    );
    drain(&mut a);
    let _ = a.handle(now, election);
    let actions = drain(&mut a);
    let persist = actions
        .iter()
        .position(|x| matches!(x, Action::Persist(p) if p.voted_for.as_deref() == Some("c")));
    let vote = actions.iter().position(
        |x| matches!(x, Action::Publish(m) if matches!(m.body, Body::Vote { granted: true, .. })),
    );
    assert!(
        matches!((persist, vote), (Some(p), Some(v)) if p < v),
        "{actions:?}"
    );
}

#[test]
fn a_voter_keeps_its_vote_for_the_term() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    for c in ["c", "b"] {
        let e = b.msg(
            c,
            1,
            Body::Election {
                candidate: c.into(),
                priority: 9,
                pre_vote: false,
            },
        );
        let _ = a.handle(now, e);
    }
    let actions = drain(&mut a);
    let to_b = published(&actions)
        .iter()
        .any(|x| matches!(x, Body::Vote { candidate, granted: true, .. } if candidate == "b"));
    assert!(!to_b, "second vote in term 1: {actions:?}");
    assert_eq!(a.persistent().voted_for.as_deref(), Some("c"));
}

#[test]
fn a_vote_promises_no_other_vote_for_t() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    let e = b.msg(
        "c",
        1,
        Body::Election {
            candidate: "c".into(),
            priority: 9,
            pre_vote: false,
        },
    );
    let _ = a.handle(now, e);
    drain(&mut a);
    // b asks for the next term just before T has passed, then just after.
    let _ = a.handle(
        now + T - Duration::from_millis(1),
        pre_vote(&mut b, "b", 2, 20),
    );
    assert!(!grants_pre_vote(&drain(&mut a), "b"));
    let _ = a.handle(
        now + T + Duration::from_millis(1),
        pre_vote(&mut b, "b", 2, 20),
    );
    assert!(grants_pre_vote(&drain(&mut a), "b"));
}

#[test]
fn a_rival_that_does_not_hear_us_or_a_quorum_vetoes_nobody() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    // c outranks b and hears a and b: a refuses b and waits for c.
    let c_two_way = b.presence("c", 0, 9, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now, c_two_way);
    let _ = a.handle(now, pre_vote(&mut b, "b", 1, 5));
    assert!(!grants_pre_vote(&drain(&mut a), "b"));
    // c goes deaf: its next advertisement hears nobody; b gets a's pre-vote at once.
    let c_deaf = b.presence("c", 0, 9, Candidacy::Eligible, &[]);
    let _ = a.handle(now, c_deaf);
    let _ = a.handle(now, pre_vote(&mut b, "b", 1, 5));
    assert!(grants_pre_vote(&drain(&mut a), "b"));
}

#[test]
fn a_rival_that_has_not_won_within_t_of_the_first_veto_vetoes_no_more() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    let c = b.presence("c", 0, 9, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now, c);
    let _ = a.handle(now, pre_vote(&mut b, "b", 1, 5));
    assert!(!grants_pre_vote(&drain(&mut a), "b"));
    // c keeps advertising, so it stays live and steady, but it never wins.
    for k in 1..=7 {
        let c_again = b.presence("c", 0, 9, Candidacy::Eligible, &["a", "b"]);
        let _ = a.handle(now + H * k, c_again);
    }
    let later = now + H * 7;
    let _ = a.handle(later, pre_vote(&mut b, "b", 1, 5));
    assert!(grants_pre_vote(&drain(&mut a), "b"));
}

#[test]
fn a_booting_node_says_so_then_becomes_eligible() {
    let b = Bench::new(&MEMBERS);
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let _ = a.handle(b.t0, Input::Tick);
    let first = drain(&mut a);
    assert!(published(&first).iter().any(|x| matches!(
        x,
        Body::Presence {
            candidacy: Candidacy::Booting,
            ..
        }
    )));
    assert!(!a.view(b.t0).can_vote);
    let _ = a.handle(b.at(T), Input::Tick);
    let after = drain(&mut a);
    assert!(published(&after).iter().any(|x| matches!(
        x,
        Body::Presence {
            candidacy: Candidacy::Eligible,
            ..
        }
    )));
    assert!(a.view(b.at(T)).can_vote);
}

#[test]
fn the_start_up_guard_ends_on_a_resign_of_its_term_not_an_older_one() {
    let mut b = Bench::new(&MEMBERS);
    let persisted = Persistent {
        term: 5,
        voted_for: None,
    };
    let mut a = node_at("a", false, persisted, b.t0);
    let now = b.at(Duration::from_millis(100));
    let _ = a.handle(now, b.resign_from_b(4, None));
    assert!(
        !a.view(now).can_vote,
        "a resign of term 4 proves nothing about term 5"
    );
    let _ = a.handle(now, b.resign_from_b(5, None));
    assert!(a.view(now).can_vote);
}

#[test]
fn following_a_leader_ends_the_start_up_guard_with_a_guard_for_that_leader() {
    let mut b = Bench::new(&MEMBERS);
    let persisted = Persistent {
        term: 5,
        voted_for: None,
    };
    let mut a = node_at("a", false, persisted, b.t0);
    let now = b.at(Duration::from_millis(100));
    let hb = b.heartbeat_from_b(5);
    let _ = a.handle(now, hb);
    assert!(a.view(now).can_vote);
    // It still votes for nobody but the leader while the leader is heard.
    let _ = a.handle(now, pre_vote(&mut b, "c", 6, 9));
    assert!(!grants_pre_vote(&drain(&mut a), "c"));
}

#[test]
fn a_member_back_from_a_restart_ranks_below_the_steady_ones() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    for c in [Candidacy::Eligible, Candidacy::Booting, Candidacy::Eligible] {
        let p = b.presence("c", 0, 9, c, &["a", "b"]);
        let _ = a.handle(now, p);
    }
    // c outranks b by priority but flapped: b is no longer vetoed for it.
    let _ = a.handle(now, pre_vote(&mut b, "b", 1, 5));
    assert!(grants_pre_vote(&drain(&mut a), "b"));
}

#[test]
fn a_leader_that_lost_its_quorum_ranks_below_the_steady_ones() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    let c = b.presence("c", 0, 9, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now, c);
    let resign = b.msg(
        "c",
        0,
        Body::Resign {
            leader: "c".into(),
            successor: None,
            lost_quorum: true,
        },
    );
    let _ = a.handle(now, resign);
    // A later term (a resigned leader is out of the ranking only in its own term), and c
    // eligible again, live and two-way.
    let later = now + H;
    let c = b.presence("c", 1, 9, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(later, c);
    assert_eq!(a.term(), 1);
    let _ = a.handle(later, pre_vote(&mut b, "b", 2, 5));
    assert!(grants_pre_vote(&drain(&mut a), "b"));
}

#[test]
fn an_advertisement_overtaken_by_a_newer_one_is_ignored() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    let old = b.presence("c", 0, 9, Candidacy::Booting, &["a", "b"]);
    let new = b.presence("c", 0, 9, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now, new);
    let _ = a.handle(now, old);
    let c = a.peers(now).into_iter().find(|m| m.id == "c").unwrap();
    assert_eq!(c.candidacy, Some(Candidacy::Eligible));
}

#[test]
fn a_member_set_two_ids_away_stops_all_voting_while_it_is_heard() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T * 3);
    // b lists a, b, c, d, e: two more than a's set.
    let mut far = Bench::new(&["a", "b", "c", "d", "e"]);
    far.seq = 50;
    let p = far.msg(
        "b",
        0,
        Body::Presence {
            priority: 5,
            candidacy: Candidacy::Eligible,
            hears: vec!["a".into()],
            member_ids: ["a", "b", "c", "d", "e"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            flapped: false,
        },
    );
    let _ = a.handle(now, p);
    let v = a.view(now);
    assert!(!v.can_vote);
    assert_eq!(v.config_conflicts, vec!["b".to_string()]);
    let _ = a.handle(now, pre_vote(&mut b, "c", 1, 9));
    assert!(!grants_pre_vote(&drain(&mut a), "c"));
    // One id away (a, b, c, d) is a safe change: it votes again once b says so.
    let mut near = Bench::new(&["a", "b", "c", "d"]);
    near.seq = 60;
    let p = near.msg(
        "b",
        0,
        Body::Presence {
            priority: 5,
            candidacy: Candidacy::Eligible,
            hears: vec!["a".into()],
            member_ids: ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect(),
            flapped: false,
        },
    );
    let _ = a.handle(now, p);
    assert!(a.view(now).can_vote);
}

#[test]
fn the_first_lease_runs_from_when_the_election_left_not_from_the_victory() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = campaigning(&mut b);
    let asked = b.at(T + H);
    let _ = a.handle(asked, grant(&mut b, 1, true));
    assert_eq!(a.role(), Role::Candidate);
    drain(&mut a);
    // The vote arrives late: the lease still counts from the request.
    let won = asked + Duration::from_millis(700);
    let _ = a.handle(won, grant(&mut b, 1, false));
    assert_eq!(a.role(), Role::Leader);
    let lease = Timings::default().lease;
    assert_eq!(a.view(won).lease_until, Some(asked + lease));
}

#[test]
fn a_lease_is_renewed_from_the_heartbeats_send_time_not_from_the_acks() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let lease = Timings::default().lease;
    // The next heartbeat, then its ack 300 ms later.
    let sent = b.at(T + H + H);
    let _ = a.handle(sent, Input::Tick);
    let hb_seq = drain(&mut a)
        .iter()
        .find_map(|x| match x {
            Action::Publish(m) if matches!(m.body, Body::Heartbeat { .. }) => Some(m.seq),
            _ => None,
        })
        .expect("a heartbeat after h");
    let acked = sent + Duration::from_millis(300);
    let members = b.members_of_fingerprint();
    let ack = b.msg(
        "b",
        1,
        Body::Ack {
            leader: "a".into(),
            hb_seq,
            priority: 2,
            candidacy: Candidacy::Eligible,
            hears: vec!["a".into(), "c".into()],
            member_ids: members,
            flapped: false,
        },
    );
    assert_eq!(a.handle(acked, ack), Ok(Outcome::Accepted));
    assert_eq!(a.view(acked).lease_until, Some(sent + lease));
}

/// Rule 12: the others rank a node back from a restart below the steady members for a flap
/// window; it ranks itself the same way, so it does not veto a steady lower-ranked candidate
/// that vetoes it (two nodes each vetoing the other would leave a 2-node cluster leaderless
/// until the vetoes run out: simulator seeds 6933 and 7394).
#[test]
fn a_node_back_from_a_restart_does_not_veto_a_steady_lower_ranked_candidate() {
    let mut b = Bench::new(&MEMBERS);
    let now = b.at(T + H);
    // A first start: steady, it outranks priority 0 and vetoes.
    let mut fresh = node_at("a", true, Persistent::default(), b.t0);
    let _ = fresh.handle(now, Input::Tick);
    drain(&mut fresh);
    let ask = pre_vote(&mut b, "b", fresh.term() + 1, 0);
    let _ = fresh.handle(now, ask);
    assert!(
        !grants_pre_vote(&drain(&mut fresh), "b"),
        "a steady node vetoes"
    );
    // Back from a restart (a term on disk): within the flap window it grants.
    let back = Persistent {
        term: 3,
        voted_for: None,
    };
    let mut restarted = node_at("a", true, back, b.t0);
    let _ = restarted.handle(now, Input::Tick);
    drain(&mut restarted);
    let ask = pre_vote(&mut b, "b", restarted.term() + 1, 0);
    let _ = restarted.handle(now, ask);
    assert!(
        grants_pre_vote(&drain(&mut restarted), "b"),
        "a flapped node defers"
    );
}

/// Rule 12: two nodes back from restarts at about the same time each rank themselves as
/// flapped and say so. Each must take the other's word, or each defers to the other (waits a
/// stagger for it) and their campaigns collide round after round (a 2-node cluster stayed
/// leaderless: simulator seed 6578).
#[test]
fn a_peer_that_says_it_flapped_ranks_as_flapped() {
    let mut b = Bench::new(&MEMBERS);
    let back = Persistent {
        term: 3,
        voted_for: None,
    };
    // c (priority 1) outranks a (priority 0); both come back from restarts with term 3 on disk.
    let mut c = node_at("c", true, back, b.t0);
    let advert = |b: &mut Bench, c: Candidacy| {
        let member_ids = b.members_of_fingerprint();
        b.msg(
            "a",
            3,
            Body::Presence {
                priority: 0,
                candidacy: c,
                hears: vec!["a".into(), "c".into()],
                member_ids,
                flapped: true,
            },
        )
    };
    let booting = advert(&mut b, Candidacy::Booting);
    let _ = c.handle(b.at(Duration::from_millis(2800)), booting);
    let mut sent = drain(&mut c);
    let eligible = advert(&mut b, Candidacy::Eligible);
    let _ = c.handle(b.at(Duration::from_millis(2900)), eligible);
    sent.extend(drain(&mut c));
    let stagger = Timings::default().stagger;
    let _ = c.handle(b.at(T), Input::Tick);
    sent.extend(drain(&mut c));
    // c says it flapped, so that a mirrors it in turn.
    let says: Vec<bool> = published(&sent)
        .iter()
        .filter_map(|body| body.advert().map(|a| a.flapped))
        .collect();
    assert!(
        !says.is_empty() && says.iter().all(|f| *f),
        "c's adverts say flapped: {says:?}"
    );
    let _ = c.handle(b.at(T + stagger / 2), Input::Tick);
    assert_eq!(
        c.role(),
        Role::PreCandidate,
        "c, the better ranked, waits no stagger for a"
    );
}

/// Rule 10: a successor's pre-vote that arrives before the leader's resign is refused (the
/// voter still guards the leader's lease) but kept, and granted the moment the resign lands,
/// so a handover whose messages race costs milliseconds, not a round.
#[test]
fn a_pre_vote_refused_for_the_leaders_guard_is_granted_when_its_resign_arrives() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let ask = pre_vote(&mut b, "c", 2, 9);
    let _ = a.handle(now, ask);
    assert!(
        !grants_pre_vote(&drain(&mut a), "c"),
        "the leader's lease is guarded"
    );
    let later = now + Duration::from_millis(5);
    let resign = b.resign_from_b(1, Some("c"));
    let _ = a.handle(later, resign);
    assert!(
        grants_pre_vote(&drain(&mut a), "c"),
        "answered as the resign lands"
    );
}

/// Rule 10: a resign that names a successor outside this node's member set (the ex-leader still
/// lists it during a membership change) does not make this node favor it: that successor could
/// never win here, and favoring it would refuse every other candidate for `T`.
#[test]
fn a_successor_this_node_does_not_count_is_not_favored() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let resign = b.resign_from_b(1, Some("d"));
    let later = now + Duration::from_millis(5);
    let _ = a.handle(later, resign);
    drain(&mut a);
    let ask = pre_vote(&mut b, "c", 2, 9);
    let _ = a.handle(later + Duration::from_millis(5), ask);
    assert!(
        grants_pre_vote(&drain(&mut a), "c"),
        "c, a member, gets the pre-vote although the resign named d"
    );
}

/// Rule 10: the leader's last heartbeat, sent just before its resign on the same slow path, may
/// land between the successor's pre-vote request and the resign. The deferred request must
/// survive it, or the successor waits a whole round (a 1.5 s gap in a rolling restart).
#[test]
fn a_deferred_pre_vote_survives_a_heartbeat_sent_before_the_resign() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let ask = pre_vote(&mut b, "c", 2, 9);
    let _ = a.handle(now + Duration::from_millis(1), ask);
    assert!(!grants_pre_vote(&drain(&mut a), "c"), "guarded");
    let hb = b.heartbeat_from_b(1);
    let _ = a.handle(now + Duration::from_millis(20), hb);
    drain(&mut a);
    let resign = b.resign_from_b(1, Some("c"));
    let _ = a.handle(now + Duration::from_millis(25), resign);
    assert!(
        grants_pre_vote(&drain(&mut a), "c"),
        "answered as the resign lands"
    );
}

/// Rule 10: a deferred pre-vote of a leader that goes on leading is never granted, and it
/// lapses after `T`.
#[test]
fn a_deferred_pre_vote_lapses_while_the_leader_goes_on() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, mut now) = following_b(&mut b);
    let ask = pre_vote(&mut b, "c", 2, 9);
    let _ = a.handle(now, ask);
    let mut sent = drain(&mut a);
    // The leader goes on for 2 T; then it resigns.
    let end = now + T * 2;
    while now < end {
        now += H;
        let hb = b.heartbeat_from_b(1);
        let _ = a.handle(now, hb);
        sent.extend(drain(&mut a));
    }
    let resign = b.resign_from_b(1, Some("c"));
    let _ = a.handle(now + Duration::from_millis(5), resign);
    sent.extend(drain(&mut a));
    assert!(
        !grants_pre_vote(&sent, "c"),
        "a request older than T is not answered"
    );
}

/// Rule 8: a restarted node's start-up guard stands in for acks it may have sent before the
/// crash; a heartbeat of an older term than the one on disk (a deposed leader, a message held
/// up on the way) proves nothing about them and must not end it.
#[test]
fn a_stale_heartbeat_does_not_end_the_start_up_guard() {
    let mut b = Bench::new(&MEMBERS);
    let back = Persistent {
        term: 5,
        voted_for: None,
    };
    let mut a = node_at("a", false, back, b.t0);
    let now = b.at(Duration::from_secs(1));
    let stale = b.heartbeat_from_b(3);
    let _ = a.handle(now, stale);
    drain(&mut a);
    let ask = pre_vote(&mut b, "c", 6, 9);
    let _ = a.handle(now + Duration::from_millis(5), ask);
    assert!(
        !grants_pre_vote(&drain(&mut a), "c"),
        "still inside its start-up guard"
    );
    // The guard does end at T: then the same request is granted.
    let ask = pre_vote(&mut b, "c", 6, 9);
    let _ = a.handle(b.at(T + H), ask);
    assert!(grants_pre_vote(&drain(&mut a), "c"), "after the guard");
}

/// Rule 8 with rule 1: a leader's election or resign proves earlier leases over only when its
/// quorum shares a node with every quorum of ours, that is when its member set is ours. During a
/// member change a restarted node hears leaders of the other set: they must not end its guard.
#[test]
fn only_a_leader_with_our_member_set_ends_the_start_up_guard() {
    let mut b = Bench::new(&MEMBERS);
    let back = Persistent {
        term: 5,
        voted_for: None,
    };
    let mut a = node_at("a", false, back, b.t0);
    let now = b.at(Duration::from_millis(100));
    let mut other = Bench::new(&["a", "b", "c", "d"]);
    other.seq = 100;
    let hb = other.heartbeat_from_b(5);
    let _ = a.handle(now, hb);
    let resign = other.resign_from_b(5, None);
    let _ = a.handle(now, resign);
    drain(&mut a);
    assert!(
        !a.view(now).can_vote,
        "a leader of another member set ended the start-up guard"
    );
    let hb = b.heartbeat_from_b(6);
    let _ = a.handle(now, hb);
    assert!(a.view(now).can_vote, "a leader of our set ends it");
}

/// Rule 10: the cooldown after a resign keeps automatic preemption from handing leadership
/// straight back; an operator who names the node that just resigned is obeyed at once.
#[test]
fn an_operator_may_hand_leadership_back_to_a_node_that_just_resigned() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let now = b.at(T + H + Duration::from_millis(10));
    let cooling = b.presence("b", a.term(), 5, Candidacy::Cooling, &["a", "c"]);
    let _ = a.handle(now, cooling);
    drain(&mut a);
    let step_down = Input::StepDown {
        successor: Some("b".into()),
        expected_term: None,
    };
    assert!(
        a.handle(now, step_down).is_ok(),
        "refused a cooling successor"
    );
    assert!(!a.view(now).is_leader_at(now));
    assert!(published(&drain(&mut a)).iter().any(|body| matches!(
        body,
        Body::Resign { successor: Some(s), .. } if s == "b"
    )));
}

/// Every refusal of a named successor says what would make the same request succeed.
#[test]
fn a_refused_successor_is_told_when_it_would_be_accepted() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let now = b.at(T + H + Duration::from_millis(10));
    let one_way = b.presence("b", a.term(), 5, Candidacy::Eligible, &["c"]);
    let _ = a.handle(now, one_way);
    let reasons: Vec<String> = ["b", "c", "a", "x"]
        .into_iter()
        .map(|s| {
            let ask = Input::StepDown {
                successor: Some(s.into()),
                expected_term: None,
            };
            match a.handle(now, ask) {
                Err(CommandError::SuccessorIneligible { reason, .. }) => reason,
                other => panic!("{s}: expected a refusal, got {other:?}"),
            }
        })
        .collect();
    assert!(
        reasons[0].contains("one-way") && reasons[0].contains("accepted once"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("never been heard") && reasons[1].contains("accepted once"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("name another member"), "{reasons:?}");
    assert!(reasons[3].contains("add it first"), "{reasons:?}");
    assert!(a.view(now).is_leader_at(now), "a refusal changes nothing");
}

/// Rule 10, found by the simulator (seed 2821): a successor's pre-vote overtakes the resign of
/// a leader that outranks it and was heard after its last heartbeat (a late duplicate, an
/// advert). Judged as of the end of the guard, that leader still looked live and vetoed the
/// successor, so the request was not kept for the resign and the successor lost a whole round
/// (1.6 s). The leader whose resign the request waits for is no rival.
#[test]
fn a_pre_vote_that_overtakes_the_resign_of_a_better_ranked_leader_is_kept() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let advert = b.presence("b", 1, 5, Candidacy::Eligible, &["a", "c"]);
    let _ = a.handle(now + Duration::from_millis(10), advert);
    // c (priority 1) ranks below the leader b (priority 5).
    let ask = pre_vote(&mut b, "c", 2, 1);
    let _ = a.handle(now + Duration::from_millis(20), ask);
    assert!(!grants_pre_vote(&drain(&mut a), "c"), "guarded");
    let resign = b.resign_from_b(1, Some("c"));
    let _ = a.handle(now + Duration::from_millis(25), resign);
    assert!(
        grants_pre_vote(&drain(&mut a), "c"),
        "answered as the resign lands"
    );
}
