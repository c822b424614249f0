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
            healthy: true,
            node_id: id.into(),
            group: "g".into(),
            members: MemberSet::new(id, MEMBERS.iter().copied()).unwrap(),
            priority: 1,
            eligible,
            timings: Timings::default(),
            beat: None,
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
            term,
            seq: self.seq,
            members: self.fingerprint.clone(),
            timings: Some(Announced::of(&Timings::default())),
            ..Message::new("g".into(), from.into(), body)
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
                advert: Advert {
                    priority,
                    candidacy: c,
                    hears: hears.iter().map(|s| s.to_string()).collect(),
                    member_ids: members,
                    flapped: false,
                    unhealthy: false,
                },
            },
        )
    }

    /// A heartbeat of leader `b` (priority 5, hearing a and c) in `term`.
    fn heartbeat_from_b(&mut self, term: u64) -> Input {
        self.heartbeat_from_b_hearing(term, &["a", "c"])
    }

    /// A heartbeat of leader `b` (priority 5) in `term`, hearing `hears`.
    fn heartbeat_from_b_hearing(&mut self, term: u64, hears: &[&str]) -> Input {
        let member_ids = self.members_of_fingerprint();
        self.msg(
            "b",
            term,
            Body::Heartbeat {
                leader: "b".into(),
                timestamp: 0,
                lease_ms: 2000,
                advert: Advert {
                    priority: 5,
                    candidacy: Candidacy::Eligible,
                    hears: hears.iter().map(|s| s.to_string()).collect(),
                    member_ids,
                    flapped: false,
                    unhealthy: false,
                },
            },
        )
    }

    /// `from`'s ack of leader a's heartbeat `hb_seq` in `term`, promising our `T`.
    fn ack_from(&mut self, from: &str, term: u64, hb_seq: u64) -> Input {
        let member_ids = self.members_of_fingerprint();
        self.msg(
            from,
            term,
            Body::Ack {
                leader: "a".into(),
                hb_seq,
                guard_ms: Some(T.as_millis() as u64),
                advert: Advert {
                    priority: 2,
                    candidacy: Candidacy::Eligible,
                    hears: vec!["a".into(), "c".into()],
                    member_ids,
                    flapped: false,
                    unhealthy: false,
                },
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

/// When `n` asks to be woken next, after a step it ran at `now`: a deadline not later than that
/// step would wake it again at the same instant for ever, so a test that follows its timer fails
/// here at once instead of spinning until the mutation check's timeout (a mutant that stops a
/// timer from moving on).
fn wake(n: &Node, now: Instant) -> Instant {
    let at = n.poll_timeout().expect("a deadline");
    assert!(
        at > now,
        "asks to be woken at {at:?}, not after the step at {now:?}"
    );
    at
}

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

/// `candidate`'s request for pre-votes (`pre_vote`) or votes in `term`.
fn ask(b: &mut Bench, candidate: &str, term: u64, priority: u32, pre_vote: bool) -> Input {
    b.msg(
        candidate,
        term,
        Body::Election {
            candidate: candidate.into(),
            priority,
            pre_vote,
        },
    )
}

fn pre_vote(b: &mut Bench, candidate: &str, term: u64, priority: u32) -> Input {
    ask(b, candidate, term, priority, true)
}

fn election(b: &mut Bench, candidate: &str, term: u64, priority: u32) -> Input {
    ask(b, candidate, term, priority, false)
}

/// Leader `a` steps down at `at`, naming no successor; it must lead then.
fn step_down(a: &mut Node, at: Instant) {
    a.handle(
        at,
        Input::StepDown {
            successor: None,
            expected_term: None,
        },
    )
    .expect("it leads");
}

fn grants_pre_vote(actions: &[Action], candidate: &str) -> bool {
    published(actions).iter().any(|b| {
        matches!(b, Body::Vote { candidate: c, granted: true, pre_vote: true, .. } if c == candidate)
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
            guard_ms: (!pre_vote).then_some(T.as_millis() as u64),
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
            advert: Advert {
                candidacy: Candidacy::Booting,
                ..
            }
        }
    )));
    assert!(!a.view(b.t0).can_vote);
    let _ = a.handle(b.at(T), Input::Tick);
    let after = drain(&mut a);
    assert!(published(&after).iter().any(|x| matches!(
        x,
        Body::Presence {
            advert: Advert {
                candidacy: Candidacy::Eligible,
                ..
            }
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
        promised: None,
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
        promised: None,
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
    let _ = a.handle(now, presence_with_set(&["a", "b", "c", "d", "e"], 50));
    let v = a.view(now);
    assert!(!v.can_vote);
    assert_eq!(v.config_conflicts, vec!["b".to_string()]);
    let _ = a.handle(now, pre_vote(&mut b, "c", 1, 9));
    assert!(!grants_pre_vote(&drain(&mut a), "c"));
    // One id away (a, b, c, d) is a safe change: it votes again once b says so.
    let _ = a.handle(now, presence_with_set(&["a", "b", "c", "d"], 60));
    assert!(a.view(now).can_vote);
}

/// A presence of `b` listing `ids` as its member set.
fn presence_with_set(ids: &[&str], seq: u64) -> Input {
    let mut other = Bench::new(ids);
    other.seq = seq;
    other.msg(
        "b",
        0,
        Body::Presence {
            advert: Advert {
                priority: 5,
                candidacy: Candidacy::Eligible,
                hears: vec!["a".into()],
                member_ids: ids.iter().map(|s| s.to_string()).collect(),
                flapped: false,
                unhealthy: false,
            },
        },
    )
}

#[test]
fn a_member_set_one_id_away_does_not_stop_campaigns_two_ids_away_does() {
    let b = Bench::new(&MEMBERS);
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let now = b.at(T * 3);
    let _ = a.handle(now, Input::Tick);
    assert!(a.view(now).can_campaign, "past its start-up guard");
    // One id away (a member being added) is a safe change: campaigns go on.
    let _ = a.handle(now, presence_with_set(&["a", "b", "c", "d"], 50));
    assert!(a.view(now).can_campaign);
    assert!(a.view(now).config_conflicts.is_empty());
    // Two ids away: neither votes nor campaigns while it is heard, and again once it is not.
    let _ = a.handle(now, presence_with_set(&["a", "b", "c", "d", "e"], 60));
    let v = a.view(now);
    assert!(!v.can_campaign && !v.can_vote);
    let later = now + T;
    let _ = a.handle(later, Input::Tick);
    assert!(a.view(later).can_campaign, "b unheard for T");
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
    let hb_seq = heartbeat_seq(&drain(&mut a)).expect("a heartbeat after h");
    let acked = sent + Duration::from_millis(300);
    let ack = b.ack_from("b", 1, hb_seq);
    assert_eq!(a.handle(acked, ack), Ok(Outcome::Accepted));
    assert_eq!(a.view(acked).lease_until, Some(sent + lease));
}

/// `seq` of the heartbeat among `actions`, if one left.
fn heartbeat_seq(actions: &[Action]) -> Option<u64> {
    actions.iter().find_map(|x| match x {
        Action::Publish(m) if matches!(m.body, Body::Heartbeat { .. }) => Some(m.seq),
        _ => None,
    })
}

/// Issue 39, item 4: a consistent read is answered by what a quorum confirms after it
/// arrived. The leader heartbeats at once (reads that arrive together share one round), and
/// what it reports as confirmed reaches the read's arrival only with a quorum's acks of that
/// heartbeat: an ack of an earlier one confirms only the earlier instant.
#[test]
fn a_leader_confirms_it_leads_by_a_round_of_acks_that_starts_with_the_read() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let before = b.at(T + H + H);
    let _ = a.handle(before, Input::Tick);
    let old = heartbeat_seq(&drain(&mut a)).expect("a heartbeat after h");
    let asked = before + Duration::from_millis(10);
    assert_eq!(
        a.handle(asked, Input::ConfirmLeadership),
        Ok(Outcome::Accepted)
    );
    let round = heartbeat_seq(&drain(&mut a)).expect("a heartbeat at once");
    assert_eq!(
        a.handle(asked, Input::ConfirmLeadership),
        Ok(Outcome::Accepted)
    );
    assert_eq!(heartbeat_seq(&drain(&mut a)), None, "one round for both");
    let late = asked + Duration::from_millis(1);
    let _ = a.handle(late, b.ack_from("b", 1, old));
    assert_eq!(a.view(late).leader_heard_at, Some(before), "an older round");
    let acked = late + Duration::from_millis(1);
    let _ = a.handle(acked, b.ack_from("b", 1, round));
    assert_eq!(a.view(acked).leader_heard_at, Some(asked), "confirmed");
    // A later ack of the older round takes nothing back.
    let _ = a.handle(acked, b.ack_from("c", 1, old));
    assert_eq!(a.view(acked).leader_heard_at, Some(asked));
    // Only a leader can confirm.
    let mut f = voter(&mut b);
    assert_eq!(
        f.handle(acked, Input::ConfirmLeadership),
        Err(CommandError::NotLeader {
            term: 0,
            leader: None
        })
    );
    assert_eq!(heartbeat_seq(&drain(&mut f)), None);
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
        promised: None,
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
        promised: None,
    };
    // c (priority 1) outranks a (priority 0); both come back from restarts with term 3 on disk.
    let mut c = node_at("c", true, back, b.t0);
    let advert = |b: &mut Bench, c: Candidacy| {
        let member_ids = b.members_of_fingerprint();
        b.msg(
            "a",
            3,
            Body::Presence {
                advert: Advert {
                    priority: 0,
                    candidacy: c,
                    hears: vec!["a".into(), "c".into()],
                    member_ids,
                    flapped: true,
                    unhealthy: false,
                },
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

/// Rule 12: a member that hears the others but not us counts our silence as a flap, while we,
/// hearing everyone all along (only what we send is lost), have none to count. Ranked steady
/// by ourselves and flapped by the others, we and a rival they rank first each took ourselves
/// for the best, campaigned at the same instant and split the votes round after round
/// (simulator seed 6456). So when it hears us again after leaving us out, we count ourselves
/// as flapped and say so in every advert, as we do after a restart.
#[test]
fn a_member_that_stopped_hearing_us_makes_us_count_ourselves_flapped() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    // a follows b and acks every heartbeat; what a's acks say of a's own standing.
    let mut at = b.at(T + H);
    let beat = |a: &mut Node, b: &mut Bench, at: Instant, hears: &[&str]| -> Vec<bool> {
        let hb = b.heartbeat_from_b_hearing(1, hears);
        let _ = a.handle(at, hb);
        published(&drain(a))
            .iter()
            .filter_map(|body| body.advert().map(|a| a.flapped))
            .collect()
    };
    let mut said = Vec::new();
    // For 2T b hears a; then for 3T only c (a's messages to b are lost).
    while at < b.at(T + H + T * 5) {
        let hears: &[&str] = if at < b.at(T + H + T * 2) {
            &["a", "c"]
        } else {
            &["c"]
        };
        said.extend(beat(&mut a, &mut b, at, hears));
        at += H;
    }
    assert_eq!(a.role(), Role::Follower);
    assert!(
        !said.is_empty() && said.iter().all(|f| !f),
        "steady until it can know: {said:?}"
    );
    let said = beat(&mut a, &mut b, at, &["a", "c"]);
    assert!(
        !said.is_empty() && said.iter().all(|f| *f),
        "b hears a again: a counts itself as flapped, as b does: {said:?}"
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
        promised: None,
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
        promised: None,
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
    let reasons: Vec<SuccessorRefused> = ["b", "c", "a", "x"]
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
    let h = H.as_millis() as u64;
    assert_eq!(
        reasons[..3],
        [
            SuccessorRefused::OneWay { heard_within_ms: h },
            SuccessorRefused::NeverHeard { heard_within_ms: h },
            SuccessorRefused::Itself,
        ]
    );
    assert!(matches!(&reasons[3], SuccessorRefused::NotMember { .. }));
    let words: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    assert!(
        words[0].contains("one-way") && words[0].contains("accepted once"),
        "{words:?}"
    );
    assert!(
        words[1].contains("never been heard") && words[1].contains("accepted once"),
        "{words:?}"
    );
    assert!(words[2].contains("name another member"), "{words:?}");
    assert!(words[3].contains("add it first"), "{words:?}");
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

// ---- mixed timings and versions (rules 5, 6, 8 and 15) --------------------------------------

/// A node's timings after a rolling change among 2 s / 3 s peers: a 10 s lease, a 16 s timeout.
fn long() -> Timings {
    Timings {
        lease: Duration::from_secs(10),
        election_timeout: Duration::from_secs(16),
        ..Timings::default()
    }
}

fn node_with(id: &str, eligible: bool, persisted: Persistent, now: Instant, t: Timings) -> Node {
    Node::new(
        Config {
            healthy: true,
            node_id: id.into(),
            group: "g".into(),
            members: MemberSet::new(id, MEMBERS.iter().copied()).unwrap(),
            priority: 1,
            eligible,
            timings: t,
            beat: None,
        },
        persisted,
        now,
        7,
        1 << 32,
    )
}

/// The same message from a sender running on `t`.
fn timed(input: Input, t: &Timings) -> Input {
    let Input::Message(mut m) = input else {
        unreachable!("a message")
    };
    m.timings = Some(Announced::of(t));
    Input::Message(m)
}

/// The same message as the version-2 build on main before rule 15 writes it.
fn as_v2(input: Input) -> Input {
    let Input::Message(mut m) = input else {
        unreachable!("a message")
    };
    m.v = 2;
    m.speaks = None;
    m.timings = None;
    if let Body::Ack { guard_ms, .. } | Body::Vote { guard_ms, .. } = &mut m.body {
        *guard_ms = None;
    }
    Input::Message(m)
}

fn position(actions: &[Action], what: impl Fn(&Action) -> bool) -> Option<usize> {
    actions.iter().position(what)
}

fn persists_promise(x: &Action, promised: Option<Duration>) -> bool {
    matches!(x, Action::Persist(p) if p.promised == promised)
}

/// Rule 5 across timings: a follower whose own `T` is 3 s acks a leader that announces a 16 s
/// `T`: it promises 16 s (the ack says so), votes for nobody else for 16 s, and counts the
/// leader as its leader that long; the promise is on disk before the ack leaves (rule 8).
#[test]
fn a_follower_promises_the_leaders_longer_timeout() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let hb = timed(b.heartbeat_from_b(1), &long());
    let _ = a.handle(now, hb);
    let sent = drain(&mut a);
    let sixteen = Duration::from_secs(16);
    let persist = position(&sent, |x| persists_promise(x, Some(sixteen))).expect("persisted");
    let ack = position(&sent, |x| {
        matches!(x, Action::Publish(m)
            if matches!(m.body, Body::Ack { guard_ms: Some(16_000), .. }))
    })
    .expect("an ack promising 16 s");
    assert!(persist < ack, "{sent:?}");
    let later = now + T + H;
    let _ = a.handle(later, pre_vote(&mut b, "c", 2, 9));
    assert!(!grants_pre_vote(&drain(&mut a), "c"), "still promised to b");
    assert_eq!(a.view(later).leader_at(later), Some("b"));
    let after = now + sixteen + Duration::from_millis(1);
    let _ = a.handle(after, pre_vote(&mut b, "c", 2, 9));
    assert!(grants_pre_vote(&drain(&mut a), "c"), "the promise is over");
    assert_eq!(a.view(after).leader_at(after), None);
}

/// Rule 5 for votes: the vote covers the candidate's announced `T`, and says how long.
#[test]
fn a_vote_promises_the_candidates_longer_timeout() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let ask = b.msg(
        "c",
        1,
        Body::Election {
            candidate: "c".into(),
            priority: 9,
            pre_vote: false,
        },
    );
    let _ = a.handle(now, timed(ask, &long()));
    let sent = drain(&mut a);
    let persist = position(&sent, |x| {
        matches!(x, Action::Persist(p)
            if p.voted_for.as_deref() == Some("c") && p.promised == Some(Duration::from_secs(16)))
    })
    .expect("vote and promise in one write");
    let vote = position(&sent, |x| {
        matches!(x, Action::Publish(m)
            if matches!(m.body, Body::Vote { granted: true, guard_ms: Some(16_000), .. }))
    })
    .expect("a vote promising 16 s");
    assert!(persist < vote);
    let _ = a.handle(now + Duration::from_secs(10), pre_vote(&mut b, "b", 2, 9));
    assert!(!grants_pre_vote(&drain(&mut a), "b"));
}

/// Makes `a`, running on `t`, a candidate for term 1 and gives it b's pre-vote; then `vote`.
fn elected_with(b: &mut Bench, t: Timings, vote: Input) -> (Node, Instant) {
    let mut a = node_with("a", true, Persistent::default(), b.t0, t);
    let now = b.at(t.election_timeout + t.heartbeat);
    let _ = a.handle(now, Input::Tick);
    assert_eq!(a.role(), Role::PreCandidate);
    let _ = a.handle(now, grant(b, 1, true));
    assert_eq!(a.role(), Role::Candidate);
    drain(&mut a);
    let _ = a.handle(now, vote);
    (a, now)
}

fn vote_promising(b: &mut Bench, ms: Option<u64>) -> Input {
    let v = b.msg(
        "b",
        1,
        Body::Vote {
            candidate: "a".into(),
            granted: true,
            pre_vote: false,
            guard_ms: ms,
        },
    );
    // b runs on the cluster's old timings.
    timed(v, &Timings::default())
}

/// Rule 6 across timings: a leader never counts a lease longer than its voters promised. With a
/// 10 s lease and a 16 s `T`, a vote that promises 16 s supports the whole lease; one that
/// promises only 3 s (a voter of another build that does not honour announced timings) supports
/// none of it, so the candidate does not lead on it.
#[test]
fn a_leader_counts_no_longer_lease_than_its_voters_promised() {
    let mut b = Bench::new(&MEMBERS);
    let (a, now) = elected_with(&mut b, long(), {
        let mut bb = Bench::new(&MEMBERS);
        bb.seq = 1000;
        vote_promising(&mut bb, Some(16_000))
    });
    assert_eq!(a.role(), Role::Leader);
    let lease = a.view(now).lease_until.expect("a lease") - now;
    assert!(
        lease > Duration::from_millis(9_999) && lease <= Duration::from_secs(10),
        "{lease:?}"
    );
    let mut b = Bench::new(&MEMBERS);
    let (a, now) = elected_with(&mut b, long(), {
        let mut bb = Bench::new(&MEMBERS);
        bb.seq = 1000;
        vote_promising(&mut bb, Some(3_000))
    });
    assert!(!a.view(now).is_leader_at(now), "{:?}", a.view(now));
}

/// Rule 6 with an ack that promises less than the leader's `T`: the lease it supports is
/// shorter by the difference (on the slowest clock), and a quorum's lease is its weakest
/// member's; an ack of a version-2 build promises the leader's own `T`.
#[test]
fn an_ack_renews_the_lease_only_as_far_as_its_promise_reaches() {
    let mut b = Bench::new(&MEMBERS);
    let t = long();
    let mut bb = Bench::new(&MEMBERS);
    bb.seq = 1000;
    let (mut a, now) = elected_with(&mut b, t, vote_promising(&mut bb, Some(16_000)));
    drain(&mut a);
    // Late enough in the first lease that a renewal reaches beyond it.
    let sent = now + Duration::from_secs(3);
    let _ = a.handle(sent, Input::Tick);
    let hb_seq = drain(&mut a)
        .iter()
        .find_map(|x| match x {
            Action::Publish(m) if matches!(m.body, Body::Heartbeat { .. }) => Some(m.seq),
            _ => None,
        })
        .expect("a heartbeat");
    let ack = |b: &mut Bench, ms: Option<u64>| {
        let members = b.members_of_fingerprint();
        let m = b.msg(
            "b",
            1,
            Body::Ack {
                leader: "a".into(),
                hb_seq,
                guard_ms: ms,
                advert: Advert {
                    priority: 2,
                    candidacy: Candidacy::Eligible,
                    hears: vec!["a".into(), "c".into()],
                    member_ids: members,
                    flapped: false,
                    unhealthy: false,
                },
            },
        );
        timed(m, &Timings::default())
    };
    let before = a.view(sent).lease_until.unwrap();
    let short = ack(&mut bb, Some(14_000));
    let _ = a.handle(sent + H, short);
    let until = a.view(sent + H).lease_until.unwrap();
    // 2 s less on the voter's clock is 2 s·(1−r)/(1+r) less here.
    let expected = sent + t.lease - Duration::from_secs(2).mul_f64(0.95 / 1.05);
    assert!(until.max(before) == until, "never shortened");
    let diff = if until > expected {
        until - expected
    } else {
        expected - until
    };
    assert!(diff < Duration::from_millis(1), "{until:?} vs {expected:?}");
    let old = as_v2(ack(&mut bb, Some(14_000)));
    let _ = a.handle(sent + H, old);
    let full = a.view(sent + H).lease_until.unwrap();
    assert!(
        full + Duration::from_micros(1) >= sent + t.lease,
        "{:?}",
        full - sent
    );
}

/// Rule 8: the start-up guard lasts as long as the longest promise on disk, not only `T`.
#[test]
fn the_start_up_guard_outlasts_the_longest_promise_on_disk() {
    let mut b = Bench::new(&MEMBERS);
    let back = Persistent {
        term: 1,
        voted_for: None,
        promised: Some(Duration::from_secs(16)),
    };
    let mut a = node_at("a", false, back, b.t0);
    let _ = a.handle(b.at(T + H), pre_vote(&mut b, "c", 2, 9));
    assert!(!grants_pre_vote(&drain(&mut a), "c"), "booting");
    assert!(!a.view(b.at(T + H)).can_vote);
    let after = b.at(Duration::from_secs(16) + Duration::from_millis(1));
    let _ = a.handle(after, pre_vote(&mut b, "c", 2, 9));
    assert!(grants_pre_vote(&drain(&mut a), "c"));
}

/// Rule 8: once the long promises are over, the next promise writes the shorter length, so a
/// cluster that went back to short timings does not keep long start-up guards forever; while a
/// long one still runs, it stays.
#[test]
fn the_recorded_promise_comes_down_once_the_long_ones_are_over() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let _ = a.handle(now, timed(b.heartbeat_from_b(1), &long()));
    drain(&mut a);
    // b restarted on the short timings and leads again in term 2, 5 s later: the 16 s promise
    // of term 1 still runs.
    let soon = now + Duration::from_secs(5);
    let _ = a.handle(soon, b.heartbeat_from_b(2));
    let sent = drain(&mut a);
    assert!(
        !sent.iter().any(|x| persists_promise(x, None)),
        "still running: {sent:?}"
    );
    assert_eq!(a.persistent().promised, Some(Duration::from_secs(16)));
    let late = now + Duration::from_secs(17);
    let _ = a.handle(late, b.heartbeat_from_b(2));
    let sent = drain(&mut a);
    let persist = position(&sent, |x| persists_promise(x, Some(T))).expect("written down");
    let ack = position(
        &sent,
        |x| matches!(x, Action::Publish(m) if matches!(m.body, Body::Ack { .. })),
    )
    .expect("an ack");
    assert!(persist < ack);
}

/// Rule 15: a node writes the newest version every member speaks: version 2 until it has heard
/// every member (one not heard yet may be of the old build) and while a member of the old build
/// is heard, version 3 once every member says it speaks 3. It reads both all along, a
/// version-2 message still carries the new fields, and a late message of a member's earlier run
/// changes nothing.
#[test]
fn a_node_writes_the_newest_version_every_member_it_heard_speaks() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let written = |a: &mut Node, at: Instant| {
        let _ = a.handle(at, Input::Tick);
        drain(a)
            .iter()
            .find_map(|x| match x {
                Action::Publish(m) => Some(m.clone()),
                _ => None,
            })
            .expect("a presence")
    };
    let mut at = b.at(T + H * 2);
    assert_eq!(written(&mut a, at).v, 2, "b and c may be of the old build");
    let c = b.presence("c", 0, 4, Candidacy::Eligible, &["a"]);
    let _ = a.handle(at, c);
    let old = as_v2(b.presence("b", 0, 5, Candidacy::Eligible, &["a"]));
    assert_eq!(a.handle(at, old), Ok(Outcome::Accepted), "read");
    at += H;
    let m = written(&mut a, at);
    assert_eq!(m.v, 2);
    assert_eq!(m.speaks, Some(Versions::OURS));
    assert!(m.timings.is_some());
    assert_eq!(a.view(at).writes_version, 2);
    let upgraded = b.presence("b", 0, 5, Candidacy::Eligible, &["a"]);
    let _ = a.handle(at, upgraded);
    at += H;
    assert_eq!(written(&mut a, at).v, 3, "b was upgraded");
    // A message of b's earlier run, held up on the way, does not undo it.
    let Input::Message(mut late) = as_v2(b.presence("b", 0, 5, Candidacy::Eligible, &["a"])) else {
        unreachable!()
    };
    late.seq = 1;
    let _ = a.handle(at, Input::Message(late));
    at += H;
    assert_eq!(written(&mut a, at).v, 3, "not undone by an old message");
}

/// Rule 5 with a version-2 leader: its heartbeat names only its lease; the promise covers that
/// lease as rule 7 would (on our `h` and `r`), and at least our `T`.
#[test]
fn a_version_2_leaders_lease_is_covered() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let Input::Message(mut hb) = as_v2(b.heartbeat_from_b(1)) else {
        unreachable!()
    };
    if let Body::Heartbeat { lease_ms, .. } = &mut hb.body {
        *lease_ms = 10_000;
    }
    let _ = a.handle(now, Input::Message(hb));
    let sent = drain(&mut a);
    let expected = Duration::from_secs(10).mul_f64(1.05 / 0.95) + H;
    let promised = sent
        .iter()
        .find_map(|x| match x {
            Action::Publish(m) => match m.body {
                Body::Ack { guard_ms, .. } => Some((m.v, guard_ms)),
                _ => None,
            },
            _ => None,
        })
        .expect("an ack");
    assert_eq!(promised, (2, Some(expected.as_millis() as u64)));
}

/// Rule 15 with rule 10: a resign repeated while nobody leads is written in the version the
/// members read now, not in the one of its first copy (a member heard on the older build in
/// between would drop it: simulator seed 2733, a rolling downgrade).
#[test]
fn a_repeated_resign_is_written_in_what_the_members_read_now() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let now = b.at(T + H + Duration::from_millis(10));
    let c = b.presence("c", 1, 2, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now, c);
    drain(&mut a);
    let out = a.handle(
        now,
        Input::StepDown {
            successor: None,
            expected_term: None,
        },
    );
    assert!(matches!(out, Ok(Outcome::SteppedDown { .. })), "{out:?}");
    let resigns = |actions: &[Action]| -> Vec<u32> {
        actions
            .iter()
            .filter_map(|x| match x {
                Action::Publish(m) if matches!(m.body, Body::Resign { .. }) => Some(m.v),
                _ => None,
            })
            .collect()
    };
    assert_eq!(resigns(&drain(&mut a)), vec![3]);
    let downgraded = as_v2(b.presence("c", 1, 2, Candidacy::Eligible, &["a", "b"]));
    let _ = a.handle(now + Duration::from_millis(1), downgraded);
    drain(&mut a);
    let _ = a.handle(now + H, Input::Tick);
    assert_eq!(resigns(&drain(&mut a)), vec![2], "repeated in version 2");
}

/// Rule 8 across a timing change: a promise of the node's own `T` is recorded too (once per
/// run), because the next run may have a shorter `T` and its start-up guard must still outlast
/// it (simulator seed 4493: restarted with `T` = 262 ms, it voted while its 3 s promise held).
#[test]
fn a_promise_of_its_own_t_is_on_disk_before_the_ack_leaves() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let _ = a.handle(now, b.heartbeat_from_b(1));
    let sent = drain(&mut a);
    let persist = position(&sent, |x| persists_promise(x, Some(T))).expect("recorded");
    let ack = position(
        &sent,
        |x| matches!(x, Action::Publish(m) if matches!(m.body, Body::Ack { .. })),
    )
    .expect("an ack");
    assert!(persist < ack);
    // The next ack promises the same: nothing more is written.
    let _ = a.handle(now + H, b.heartbeat_from_b(1));
    let sent = drain(&mut a);
    assert!(
        !sent.iter().any(|x| matches!(x, Action::Persist(_))),
        "{sent:?}"
    );
    // Restarted with a shorter T, it stays out of elections for the promise it recorded.
    let short = Timings {
        heartbeat: Duration::from_millis(50),
        lease: Duration::from_millis(100),
        election_timeout: Duration::from_millis(300),
        ..Timings::default()
    };
    let back = a.persistent();
    let mut again = node_with("a", false, back, now + H, short);
    let ask = pre_vote(&mut b, "c", 2, 9);
    let _ = again.handle(now + H + Duration::from_secs(1), ask);
    assert!(
        !grants_pre_vote(&drain(&mut again), "c"),
        "still bound for T = 3 s"
    );
}

/// A presence of `b` (priority 5, eligible) announcing `t`, as of its run `epoch` (the high
/// half of `seq`, which a restart raises).
fn b_presence(bench: &mut Bench, c: Candidacy, t: &Timings) -> Input {
    timed(bench.presence("b", 0, 5, c, &["a", "c"]), t)
}

/// Rule 11 across timings: a member that announces a longer `T` than ours counts as live for
/// its own `T` (it sends every `2h` of its own, which may be beyond our `T`).
#[test]
fn a_member_with_a_longer_timeout_stays_live_for_its_own_timeout() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H);
    let _ = a.handle(now, b_presence(&mut b, Candidacy::Eligible, &long()));
    let later = now + Duration::from_secs(10);
    let live = |a: &Node, at| a.peers(at).iter().any(|m| m.id == "b" && m.live);
    assert!(live(&a, later), "within b's own 16 s");
    assert!(!live(&a, now + Duration::from_secs(17)), "not after it");
}

/// Rule 12 across timings: the flaps of a member with a long `T` are remembered for ten of its
/// own election timeouts, not only for our shorter window (simulator seed 1580: a 50 s node
/// that crash-looped as leader was elected again after every restart by nodes with short
/// windows, each time costing the others its 50 s). Seen through a's veto: a (steady, priority
/// 1) vetoes b (priority 5) only while b counts as flapped.
#[test]
fn a_slow_members_flaps_are_remembered_for_ten_of_its_own_timeouts() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let t0 = b.at(T + H);
    let _ = a.handle(t0, b_presence(&mut b, Candidacy::Eligible, &long()));
    // b restarts (booting): a flap.
    let back = t0 + Duration::from_secs(1);
    let _ = a.handle(back, b_presence(&mut b, Candidacy::Booting, &long()));
    drain(&mut a);
    // 100 s later: beyond a's own flap window (10 × max(P, T) = 50 s), within b's (160 s).
    // a hears c all along: a node that heard nobody counts itself as flapped too (rule 12).
    let at = back + Duration::from_secs(100);
    let mut heard_c = back;
    while heard_c < at {
        heard_c += T;
        let c = b.presence("c", 0, 1, Candidacy::Eligible, &["a", "b"]);
        let _ = a.handle(heard_c, c);
    }
    let _ = a.handle(at, b_presence(&mut b, Candidacy::Eligible, &long()));
    drain(&mut a);
    let ask = timed(pre_vote(&mut b, "b", a.term() + 1, 5), &long());
    let _ = a.handle(at, ask);
    assert!(
        !grants_pre_vote(&drain(&mut a), "b"),
        "b still counts as flapped"
    );
}

/// Rule 12: a member merely slow to announce itself (heard again a little after our `T`, its
/// clock slower than ours) has not flapped; only silence for twice the window is one
/// (simulator seed 8035: at r = 20 % and T = 2.6h every node took the best one for a flapper,
/// vetoed it, and the cluster stayed leaderless).
#[test]
fn a_member_slow_to_announce_itself_has_not_flapped() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let t0 = b.at(T + H);
    let _ = a.handle(t0, b.presence("b", 0, 5, Candidacy::Eligible, &["a", "c"]));
    let late = t0 + T + Duration::from_millis(500);
    let _ = a.handle(
        late,
        b.presence("b", 0, 5, Candidacy::Eligible, &["a", "c"]),
    );
    drain(&mut a);
    let ask = pre_vote(&mut b, "b", a.term() + 1, 5);
    let _ = a.handle(late, ask);
    assert!(grants_pre_vote(&drain(&mut a), "b"), "b is steady");
    // Silent for more than twice T while c was heard, it has (a silence in which this node
    // heard nobody would be this node's own).
    let _ = a.handle(
        late + T,
        b.presence("c", 0, 5, Candidacy::Eligible, &["a", "b"]),
    );
    let gone = late + T * 2 + Duration::from_millis(10);
    let _ = a.handle(
        gone,
        b.presence("b", 0, 5, Candidacy::Eligible, &["a", "c"]),
    );
    drain(&mut a);
    let ask = pre_vote(&mut b, "b", a.term() + 1, 5);
    let _ = a.handle(gone, ask);
    assert!(!grants_pre_vote(&drain(&mut a), "b"), "b flapped");
}

mod beat;
mod handlers;
mod health;
mod maintenance;
mod timers;
