//! Each condition of the message and command handlers on its own: a test per clause, because
//! cargo-mutants showed that a clause turned around (an `&&` for an `||`, a `==` for a `!=`)
//! often goes unseen by the simulator, whose seeds rarely build the one case the clause is for.

use super::*;

const MS: Duration = Duration::from_millis(1);

/// How often an ex-leader repeats its resign (rule 10; `RESIGN_REPEATS` in node/lead.rs).
const REPEATS: usize = 3;

/// Rule 1 and rule 15: a message of another group, one this node sent itself, and one of a
/// version it does not speak change nothing.
#[test]
fn messages_of_another_group_of_this_node_or_of_an_unknown_version_are_ignored() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H);
    let before = a.view(now);
    type Change = fn(&mut Message);
    let changes: [(&str, Change); 3] = [
        ("another group", |m| m.group = "other".into()),
        ("this node's own id", |m| {
            m.from = "a".into();
            if let Body::Heartbeat { leader, .. } = &mut m.body {
                *leader = "a".into();
            }
        }),
        ("an unknown version", |m| m.v = 99),
    ];
    for (what, change) in changes {
        let Input::Message(mut m) = b.heartbeat_from_b(5) else {
            unreachable!("a message")
        };
        change(&mut m);
        assert_eq!(
            a.handle(now, Input::Message(m)),
            Ok(Outcome::Ignored),
            "{what}"
        );
        assert!(drain(&mut a).is_empty(), "{what}");
        assert_eq!(a.view(now), before, "{what}");
    }
}

fn transitions(actions: &[Action]) -> Vec<(Option<String>, Option<String>, Reason)> {
    actions
        .iter()
        .filter_map(|x| match x {
            Action::Transition(t) => Some((t.previous.clone(), t.leader.clone(), t.reason)),
            _ => None,
        })
        .collect()
}

/// The shell's history, metrics and logs hear of every change of the known leader, once, and of
/// nothing else; a leader heard again is known since it was first heard.
#[test]
fn every_change_of_the_known_leader_is_reported_once() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let _ = a.handle(now, b.heartbeat_from_b(1));
    assert_eq!(
        transitions(&drain(&mut a)),
        [(None, Some("b".to_string()), Reason::Elected)]
    );
    let _ = a.handle(now + H, b.heartbeat_from_b(1));
    assert_eq!(transitions(&drain(&mut a)), []);
    let v = a.view(now + H);
    assert_eq!(v.leader_since, Some(now));
    assert_eq!(v.leader_heard_at, Some(now + H));

    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let x = b.at(T + H + MS * 10);
    step_down(&mut a, x);
    assert_eq!(
        transitions(&drain(&mut a)),
        [(Some("a".to_string()), None, Reason::StepDown)]
    );
}

fn grants_vote(actions: &[Action], candidate: &str) -> bool {
    published(actions).iter().any(|x| {
        matches!(x, Body::Vote { candidate: c, granted: true, pre_vote: false, .. } if c == candidate)
    })
}

/// Rule 5 in the vote handler itself: a request of the term this node is already in (it learnt
/// the term from another of the candidate's messages, which overtook the request) is refused
/// while it guards another leader's lease. Granting it could give two leaders.
#[test]
fn a_vote_request_of_the_current_term_is_refused_while_another_lease_is_guarded() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let _ = a.handle(
        now + MS,
        b.presence("c", 2, 9, Candidacy::Eligible, &["a", "b"]),
    );
    assert_eq!(a.term(), 2);
    drain(&mut a);
    let _ = a.handle(now + MS * 2, election(&mut b, "c", 2, 9));
    let sent = drain(&mut a);
    assert!(!grants_vote(&sent, "c"), "{sent:?}");
    assert_eq!(a.persistent().voted_for, None);
}

/// Rule 3: a round counts a vote only when it is granted, and granted to this node. Votes go to
/// every member (the topic fans them out), so a candidate hears the grants its rival of the
/// same term receives: counting one would let two candidates of one term win on one voter's
/// single vote. Each stage is checked with a grant for another candidate and a refusal, then
/// with a real grant, which must count.
#[test]
fn only_a_vote_granted_to_this_node_counts() {
    let mut b = Bench::new(&MEMBERS);
    let vote = |b: &mut Bench, candidate: &str, granted: bool, pre_vote: bool| {
        b.msg(
            "b",
            1,
            Body::Vote {
                candidate: candidate.into(),
                granted,
                pre_vote,
                guard_ms: (!pre_vote).then_some(T.as_millis() as u64),
            },
        )
    };
    let mut a = campaigning(&mut b);
    let now = b.at(T + H);
    for (stage, pre_vote, next) in [
        (Role::PreCandidate, true, Role::Candidate),
        (Role::Candidate, false, Role::Leader),
    ] {
        for (candidate, granted) in [("c", true), ("a", false)] {
            let v = vote(&mut b, candidate, granted, pre_vote);
            assert_eq!(
                a.handle(now, v),
                Ok(Outcome::Ignored),
                "{candidate} {granted}"
            );
            assert_eq!(a.role(), stage, "a vote for {candidate}, granted {granted}");
        }
        let v = vote(&mut b, "a", true, pre_vote);
        assert_eq!(a.handle(now, v), Ok(Outcome::Accepted));
        assert_eq!(a.role(), next);
        drain(&mut a);
    }
}

/// Rules 3 and 8: a granted vote and the promise it makes are written in one step; asking again
/// for the same vote writes nothing.
#[test]
fn a_vote_and_its_promise_are_written_once() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let _ = a.handle(now, election(&mut b, "c", 1, 9));
    let sent = drain(&mut a);
    assert!(grants_vote(&sent, "c"));
    let writes = |actions: &[Action]| {
        actions
            .iter()
            .filter(|x| matches!(x, Action::Persist(p) if p.voted_for.as_deref() == Some("c")))
            .count()
    };
    assert_eq!(writes(&sent), 1, "{sent:?}");
    let _ = a.handle(now + MS, election(&mut b, "c", 1, 9));
    let again = drain(&mut a);
    assert!(grants_vote(&again, "c"), "the same vote, sent again");
    assert_eq!(writes(&again), 0, "{again:?}");
}

/// Rule 10: a successor with our member set is favored for `T`: other candidates are refused
/// meanwhile, even when they outrank it.
#[test]
fn a_named_successor_with_our_member_set_is_favored() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let _ = a.handle(now, b.presence("c", 1, 1, Candidacy::Eligible, &["a", "b"]));
    let _ = a.handle(now + MS * 10, b.resign_from_b(1, Some("c")));
    drain(&mut a);
    let _ = a.handle(now + MS * 20, pre_vote(&mut b, "b", 2, 5));
    assert!(!grants_pre_vote(&drain(&mut a), "b"), "c is favored");
}

/// An eligible `a` that follows leader b (its start-up guard ended) and has heard c (priority 1),
/// when b resigns naming `successor` at `H`.
fn resigned_to(b: &mut Bench, successor: &str) -> (Node, Instant) {
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let _ = a.handle(b.t0, Input::Tick);
    let _ = a.handle(b.at(MS), b.heartbeat_from_b(1));
    let _ = a.handle(
        b.at(MS * 2),
        b.presence("c", 1, 1, Candidacy::Eligible, &["a", "b"]),
    );
    let x = b.at(H);
    let _ = a.handle(x, b.resign_from_b(1, Some(successor)));
    (a, x)
}

/// Rule 10: the named successor campaigns at once and favors itself for `T`; any other member
/// waits `T`.
#[test]
fn only_the_named_successor_campaigns_at_once() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, x) = resigned_to(&mut b, "c");
    let _ = a.handle(x + H, Input::Tick);
    assert_eq!(a.role(), Role::Follower, "c was named; a waits");

    let mut b = Bench::new(&MEMBERS);
    let (mut a, x) = resigned_to(&mut b, "a");
    assert_eq!(a.role(), Role::PreCandidate, "named: at once");
    drain(&mut a);
    let _ = a.handle(x + MS, pre_vote(&mut b, "c", 2, 9));
    assert!(
        !grants_pre_vote(&drain(&mut a), "c"),
        "a favors itself, although c outranks it"
    );
}

/// Runs `a` with ticks every `H` from `from` for `n` intervals; the bodies it published.
fn run_ticks(a: &mut Node, from: Instant, n: u32) -> Vec<Body> {
    (1..=n)
        .flat_map(|k| {
            let _ = a.handle(from + H * k, Input::Tick);
            published(&drain(a))
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect()
}

fn first_flapped(bodies: &[Body]) -> Option<bool> {
    bodies.iter().find_map(|x| match x {
        Body::Presence { advert } => Some(advert.flapped),
        _ => None,
    })
}

fn lost_quorum(bodies: &[Body]) -> Vec<bool> {
    bodies
        .iter()
        .filter_map(|x| match x {
            Body::Resign { lost_quorum, .. } => Some(*lost_quorum),
            _ => None,
        })
        .collect()
}

/// Rules 10 and 12: a resign says whether the leader lost its quorum, and the ex-leader counts
/// itself as flapped only then; each resign is repeated three times while nobody
/// leads, and no more.
#[test]
fn a_resign_says_whether_the_quorum_was_lost_and_only_that_is_a_flap() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let x = b.at(T + H + MS * 10);
    step_down(&mut a, x);
    let mut sent: Vec<Body> = published(&drain(&mut a)).into_iter().cloned().collect();
    sent.extend(run_ticks(&mut a, x, 6));
    assert_eq!(lost_quorum(&sent), [false; 1 + REPEATS]);
    assert_eq!(first_flapped(&sent), Some(false), "{sent:?}");

    // No acks: the lease runs out.
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let sent = run_ticks(&mut a, b.at(T + H), 12);
    assert_eq!(lost_quorum(&sent), [true; 1 + REPEATS]);
    assert_eq!(first_flapped(&sent), Some(true), "{sent:?}");
}

/// A resign is repeated only while nobody leads: once this node follows a leader, it stops.
#[test]
fn a_resign_is_no_longer_repeated_once_a_leader_is_known() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let x = b.at(T + H + MS * 10);
    step_down(&mut a, x);
    drain(&mut a);
    // Another leader of the same term (the test's, not the protocol's: it isolates the clause).
    let _ = a.handle(x + MS, b.heartbeat_from_b(1));
    drain(&mut a);
    let sent = run_ticks(&mut a, x + MS, 6);
    assert_eq!(lost_quorum(&sent), Vec::<bool>::new(), "{sent:?}");
}

/// A stopping leader hands over only to a member that is a candidate (eligible or starting up)
/// and viable.
#[test]
fn a_successor_must_be_a_candidate_that_hears_a_quorum() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let now = b.at(T + H + MS * 10);
    let _ = a.handle(
        now,
        b.presence("b", 1, 5, Candidacy::Withdrawn, &["a", "c"]),
    );
    let _ = a.handle(now, b.presence("c", 1, 9, Candidacy::Eligible, &[]));
    assert!(!a.has_successor(now), "b withdrew; c hears nobody");
    let _ = a.handle(
        now + MS,
        b.presence("c", 1, 9, Candidacy::Eligible, &["a", "b"]),
    );
    assert!(a.has_successor(now + MS), "c hears a quorum now");
}

/// A change of priority is announced at once; a request that changes nothing sends nothing.
#[test]
fn a_change_of_candidacy_is_announced_at_once_and_no_change_is_not() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H);
    for priority in [None, Some(1)] {
        a.handle(
            now,
            Input::SetCandidacy {
                eligible: false,
                priority,
            },
        )
        .expect("accepted");
        assert_eq!(
            published(&drain(&mut a)),
            Vec::<&Body>::new(),
            "{priority:?}"
        );
    }
    a.handle(
        now,
        Input::SetCandidacy {
            eligible: false,
            priority: Some(7),
        },
    )
    .expect("accepted");
    let sent = drain(&mut a);
    assert!(published(&sent).iter().any(|x| matches!(
        x,
        Body::Presence {
            advert: Advert { priority: 7, .. }
        }
    )));
}

/// Rule 11's bounded veto: a rival's veto holds for `T` after the first one it cast, and ends
/// at that instant.
#[test]
fn a_rivals_veto_holds_for_t_after_the_first() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let first = b.at(T * 3);
    let mut asked = Vec::new();
    for k in 0..=6 {
        let at = first + H * k;
        let _ = a.handle(at, b.presence("c", 0, 9, Candidacy::Eligible, &["a", "b"]));
        if k % 3 == 0 {
            let _ = a.handle(at, pre_vote(&mut b, "b", 1, 5));
            asked.push((at - first, grants_pre_vote(&drain(&mut a), "b")));
        }
    }
    assert_eq!(
        asked,
        [(Duration::ZERO, false), (T / 2, false), (T, true)],
        "(after the first veto, granted)"
    );
}

/// Rule 10 with rule 11: while a successor is favored, its veto is the favor, not a rank veto,
/// so its bounded time starts only when the favor ends.
#[test]
fn a_veto_for_the_favored_successor_starts_its_bounded_time_when_the_favor_ends() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let x = now + MS * 10;
    let mut asked = Vec::new();
    for k in 0..=16 {
        let at = now + H * k;
        let _ = a.handle(at, b.presence("c", 1, 9, Candidacy::Eligible, &["a", "b"]));
        if k == 0 {
            let _ = a.handle(x, b.resign_from_b(1, Some("c")));
        }
        let ask = at + MS * 20;
        // During the favor; the first rank veto after it; T/2 + T after the first favor
        // veto; T after the first rank veto.
        if [3, 7, 10, 14].contains(&k) {
            let _ = a.handle(ask, pre_vote(&mut b, "b", 2, 5));
            asked.push((k, grants_pre_vote(&drain(&mut a), "b")));
        }
    }
    assert_eq!(
        asked,
        [(3, false), (7, false), (10, false), (14, true)],
        "(heartbeat intervals after b's resign, granted)"
    );
}

/// Rule 10's deferral: a pre-vote refused for a promise is kept, to be granted when the promise
/// ends, only when that is within a heartbeat interval (or the promise is our leader's).
#[test]
fn a_pre_vote_is_kept_only_when_the_promise_ends_within_a_heartbeat_interval() {
    for (before_end, kept) in [(T / 2, false), (H / 2, true)] {
        let mut b = Bench::new(&MEMBERS);
        let mut a = voter(&mut b);
        let now = b.at(T + H);
        let _ = a.handle(now, election(&mut b, "c", 1, 9));
        let (holder, until) = a.view(now).promise.expect("voted");
        assert_eq!(holder, "c");
        drain(&mut a);
        let _ = a.handle(until - before_end, pre_vote(&mut b, "b", 2, 5));
        assert!(
            !grants_pre_vote(&drain(&mut a), "b"),
            "c's lease is guarded"
        );
        let _ = a.handle(until, Input::Tick);
        assert_eq!(
            grants_pre_vote(&drain(&mut a), "b"),
            kept,
            "asked {before_end:?} before the promise ended"
        );
    }
}

/// Rule 10's deferral with rule 8: a restarted node that follows a leader of another member set
/// keeps its start-up guard; a pre-vote whose promise ends after that guard is kept and granted
/// when both are over.
#[test]
fn a_pre_vote_kept_past_the_start_up_guard_is_granted_when_both_end() {
    let mut b = Bench::new(&MEMBERS);
    let back = Persistent {
        term: 1,
        voted_for: None,
        promised: None,
    };
    let mut a = node_at("a", false, back, b.t0);
    let _ = a.handle(b.t0, Input::Tick);
    let mut other = Bench::new(&["a", "b", "c", "d"]);
    other.seq = 100;
    let _ = a.handle(b.at(MS), other.heartbeat_from_b(1));
    assert!(!a.view(b.at(MS)).can_vote, "still starting up");
    let (_, until) = a.view(b.at(MS)).promise.expect("b's lease is guarded");
    assert!(until > b.at(T));
    let _ = a.handle(until - H / 2, pre_vote(&mut b, "c", 2, 9));
    assert!(!grants_pre_vote(&drain(&mut a), "c"));
    let _ = a.handle(until, Input::Tick);
    assert!(grants_pre_vote(&drain(&mut a), "c"));
}

/// Rule 10's deferral: a kept pre-vote lapses `T` after it was asked for.
#[test]
fn a_kept_pre_vote_lapses_t_after_it_was_asked_for() {
    for (resign_after, granted) in [(T - MS, true), (T, false)] {
        let mut b = Bench::new(&MEMBERS);
        let (mut a, now) = following_b(&mut b);
        let asked = now + MS;
        let _ = a.handle(asked, pre_vote(&mut b, "c", 2, 9));
        // b goes on leading until then: a keeps guarding its lease.
        let mut t = now;
        while t + H < asked + resign_after {
            t += H;
            let _ = a.handle(t, b.heartbeat_from_b(1));
        }
        drain(&mut a);
        let _ = a.handle(asked + resign_after, b.resign_from_b(1, Some("c")));
        assert_eq!(
            grants_pre_vote(&drain(&mut a), "c"),
            granted,
            "b resigned {resign_after:?} after the request"
        );
    }
}

/// Rule 4: a kept pre-vote for a term this node has reached meanwhile is dropped.
#[test]
fn a_kept_pre_vote_for_a_term_this_node_reached_is_dropped() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let _ = a.handle(now + MS, pre_vote(&mut b, "c", 2, 9));
    let _ = a.handle(
        now + MS * 2,
        b.presence("c", 2, 9, Candidacy::Eligible, &["a", "b"]),
    );
    assert_eq!(a.term(), 2);
    let (_, until) = a.view(now + MS * 2).promise.expect("b's lease is guarded");
    drain(&mut a);
    let _ = a.handle(until, Input::Tick);
    assert!(!grants_pre_vote(&drain(&mut a), "c"));
}

/// Rule 10 at the favor's end: a pre-vote kept for a promise that ends when the favor does is
/// judged as of then, without the favor.
#[test]
fn a_favor_ends_at_its_instant() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    // c ranks below b, so once the favor is over nothing vetoes b.
    let _ = a.handle(now, b.presence("c", 1, 1, Candidacy::Eligible, &["a", "b"]));
    let x = now + MS * 10;
    let _ = a.handle(x, b.resign_from_b(1, Some("c")));
    // c's election at the same instant: a's promise to c ends when the favor does.
    let _ = a.handle(x, election(&mut b, "c", 2, 1));
    assert_eq!(a.persistent().voted_for.as_deref(), Some("c"));
    let (_, until) = a.view(x).promise.expect("voted");
    assert_eq!(until, x + T);
    drain(&mut a);
    let _ = a.handle(x + T - H / 2, pre_vote(&mut b, "b", 3, 5));
    assert!(
        !grants_pre_vote(&drain(&mut a), "b"),
        "c's lease is guarded"
    );
    let _ = a.handle(x + T, Input::Tick);
    assert!(
        grants_pre_vote(&drain(&mut a), "b"),
        "kept, and granted the instant the promise and the favor end"
    );
}

/// Leader `a` (priority 1, on `t`) of term 1, elected at `T + H` while c (priority 9) had
/// advertised since `T + 100 ms`, run in 10 ms steps for `span`, b (priority 5) acking every
/// heartbeat and c advertising every `H`; in maintenance from its election if `maintenance`.
/// When it resigned, counted from its election, and for whom.
fn lead_beside_c(
    t: Timings,
    span: Duration,
    maintenance: bool,
) -> Option<(Duration, Option<String>)> {
    lead_beside_c_as(t, span, maintenance, false, None)
}

/// [`lead_beside_c`]; with `flapped`, `a` is back from a restart (a term on disk, so flapped
/// itself, rule 12) and c says in every advert that it flapped too, while b is steady; with
/// `c_joins`, c is first heard that long after the election instead of before it, and b has
/// withdrawn (a voter only, so that a hands over to nobody before c has waited).
fn lead_beside_c_as(
    t: Timings,
    span: Duration,
    maintenance: bool,
    flapped: bool,
    c_joins: Option<Duration>,
) -> Option<(Duration, Option<String>)> {
    let mut b = Bench::new(&MEMBERS);
    let (before, term) = if flapped {
        let on_disk = Persistent {
            term: 1,
            ..Persistent::default()
        };
        (on_disk, 2)
    } else {
        (Persistent::default(), 1)
    };
    let mut a = node_with("a", true, before, b.t0, t);
    let c = |b: &mut Bench| {
        let member_ids = b.members_of_fingerprint();
        b.msg(
            "c",
            0,
            Body::Presence {
                advert: Advert {
                    priority: 9,
                    candidacy: Candidacy::Eligible,
                    hears: vec!["a".into(), "b".into()],
                    member_ids,
                    flapped,
                    unhealthy: false,
                },
            },
        )
    };
    if c_joins.is_none() {
        let _ = a.handle(b.at(T + MS * 100), c(&mut b));
    }
    let since = b.at(T + H);
    let b_candidacy = if c_joins.is_some() {
        Candidacy::Withdrawn
    } else {
        Candidacy::Eligible
    };
    let _ = a.handle(since, Input::Tick);
    assert_eq!(a.role(), Role::PreCandidate);
    let _ = a.handle(since, grant(&mut b, term, true));
    let _ = a.handle(since, grant(&mut b, term, false));
    assert_eq!(a.role(), Role::Leader);
    if maintenance {
        let _ = a.handle(since, Input::SetMaintenance { on: true });
        assert_eq!(a.role(), Role::Leader, "maintenance keeps the leader");
    }
    let (mut actions, mut sent_at) = (drain(&mut a), since);
    // Even at four times the rate, a leader sends a heartbeat every H / 4 at most: a step that
    // made more fails here at once (a heartbeat scheduled in the past answers every ack with
    // another one, which this loop would ack again, without end).
    let (mut heartbeats, most) = (0, span.as_millis() / (H / 4).as_millis() + 2);
    for step in 0..=span.as_millis() as u32 / 10 {
        let now = since + MS * 10 * step;
        heartbeats += published(&actions)
            .iter()
            .filter(|x| matches!(x, Body::Heartbeat { .. }))
            .count() as u128;
        assert!(
            heartbeats <= most,
            "{heartbeats} heartbeats by {:?}",
            now - since
        );
        for x in std::mem::take(&mut actions) {
            if let Action::Publish(m) = x {
                match m.body {
                    Body::Heartbeat { .. } => {
                        let ack = b.msg(
                            "b",
                            term,
                            Body::Ack {
                                leader: "a".into(),
                                hb_seq: m.seq,
                                guard_ms: Some(T.as_millis() as u64),
                                advert: Advert {
                                    priority: 5,
                                    candidacy: b_candidacy,
                                    hears: vec!["a".into(), "c".into()],
                                    member_ids: b.members_of_fingerprint(),
                                    flapped: false,
                                    unhealthy: false,
                                },
                            },
                        );
                        let _ = a.handle(now, ack);
                    }
                    Body::Resign { successor, .. } => return Some((sent_at - since, successor)),
                    _ => {}
                }
            }
        }
        let input = if step % 50 == 0 && c_joins.is_none_or(|j| now >= since + j) {
            c(&mut b)
        } else {
            Input::Tick
        };
        let _ = a.handle(now, input);
        (actions, sent_at) = (drain(&mut a), now);
    }
    None
}

/// Rule 12: a leader hands over to a better-ranked member once both it has led and the member
/// has been eligible for `max(P, T)`, not before; with `P` zero, never.
#[test]
fn a_leader_preempts_at_its_instant_and_never_with_preemption_off() {
    let t = Timings::default();
    let wait = t.preempt_after.max(t.election_timeout);
    assert_eq!(
        lead_beside_c(t, wait + H, false),
        Some((wait, Some("c".to_string())))
    );
    let off = Timings {
        preempt_after: Duration::ZERO,
        ..t
    };
    assert_eq!(lead_beside_c(off, T * 3, false), None);
}

/// Rule 12: a flapped leader hands over to the best member by standing, the steady b, not to
/// the flapped c that ranks higher, which would take leadership only to be preempted by b in
/// turn (two handovers, and a crash-looping node handed leadership again).
#[test]
fn a_flapped_leader_hands_over_to_a_steady_member_before_a_flapped_better_ranked_one() {
    let t = Timings::default();
    let wait = t.preempt_after.max(t.election_timeout);
    assert_eq!(
        lead_beside_c_as(t, wait + H, false, true, None).map(|(_, to)| to),
        Some(Some("b".to_string()))
    );
}

/// Rule 12: a better-ranked member that joins after the leader has led `max(P, T)` waits that
/// long from its own first advert, not a moment less: a member just back is not handed
/// leadership before it has shown it stays.
#[test]
fn a_member_that_joins_late_is_preempted_for_only_after_it_was_eligible_for_the_wait() {
    let t = Timings::default();
    let wait = t.preempt_after.max(t.election_timeout);
    let joins = wait + H * 2;
    assert_eq!(
        lead_beside_c_as(t, joins + wait + H, false, false, Some(joins)),
        Some((joins + wait, Some("c".to_string())))
    );
}

/// Rule 16: maintenance holds leadership where it is; the better-ranked c waits.
#[test]
fn a_leader_in_maintenance_never_preempts() {
    let t = Timings::default();
    let wait = t.preempt_after.max(t.election_timeout);
    assert_eq!(lead_beside_c(t, wait * 3, true), None);
}
