//! Every timer of the node at its exact instant, and the instant before (docs/protocol.md,
//! "Timers"). A deadline moved by one comparison or one sign is invisible to the simulator: its
//! seeds rarely deliver an input at the very nanosecond, and a late or early timer costs a
//! round, not a second leader. cargo-mutants found each of these unchecked.

use super::*;

const NS: Duration = Duration::from_nanos(1);
const MS: Duration = Duration::from_millis(1);

/// An eligible node `a` of a, b, c that started at the bench's zero, drawing jitter from `seed`.
fn seeded(b: &Bench, seed: u64) -> Node {
    seeded_with(b, seed, Timings::default())
}

fn seeded_with(b: &Bench, seed: u64, timings: Timings) -> Node {
    Node::new(
        Config {
            node_id: "a".into(),
            group: "g".into(),
            members: set(&MEMBERS),
            priority: 1,
            eligible: true,
            healthy: true,
            timings,
            beat: None,
        },
        Persistent::default(),
        b.t0,
        seed,
        1 << 32,
    )
}

#[test]
fn a_node_reports_the_id_and_the_timings_it_was_given() {
    let b = Bench::new(&MEMBERS);
    let a = node_with("a", true, Persistent::default(), b.t0, long());
    assert_eq!(a.id(), "a");
    assert_eq!(a.timings(), &long());
}

/// Rule 11: the jitter is drawn per node, so two nodes whose timers started together do not
/// campaign at the same instant; it is added to `T`, never taken from it.
#[test]
fn each_node_adds_its_own_jitter_to_the_election_timeout() {
    let b = Bench::new(&MEMBERS);
    let mut starts = Vec::new();
    for seed in 1..=4 {
        let mut a = seeded(&b, seed);
        let _ = a.handle(b.t0, Input::Tick);
        let _ = a.handle(b.at(T), Input::Tick);
        assert_eq!(
            a.role(),
            Role::Follower,
            "seed {seed}: not before T and its jitter"
        );
        // The jitter is below max(S / 5, h / 10) = 50 ms.
        let start = (1..=50u32)
            .map(|ms| T + MS * ms)
            .find(|&d| {
                let _ = a.handle(b.at(d), Input::Tick);
                a.role() == Role::PreCandidate
            })
            .unwrap_or_else(|| panic!("seed {seed}: no campaign within T + 50 ms"));
        starts.push(start);
    }
    starts.sort();
    starts.dedup();
    assert!(
        starts.len() > 1,
        "every seed drew the same jitter: {starts:?}"
    );
}

/// Rule 8: the start-up guard lasts `T` and not a nanosecond longer.
#[test]
fn the_start_up_guard_ends_at_its_instant() {
    let b = Bench::new(&MEMBERS);
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let _ = a.handle(b.t0, Input::Tick);
    let before = a.view(b.at(T) - NS);
    assert!(!before.can_vote);
    assert_eq!(before.candidacy, Candidacy::Booting);
    let then = a.view(b.at(T));
    assert!(then.can_vote);
    assert_eq!(then.candidacy, Candidacy::Eligible);
}

/// Rule 10: the cooldown after a resign lasts `T` and not a nanosecond longer.
#[test]
fn a_cooldown_ends_at_its_instant() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let x = b.at(T + H + MS * 10);
    step_down(&mut a, x);
    for at in [x, x + T - NS] {
        let v = a.view(at);
        assert_eq!(v.candidacy, Candidacy::Cooling, "{:?} after", at - x);
        assert!(!v.can_campaign);
    }
    let after = a.view(x + T);
    assert_eq!(after.candidacy, Candidacy::Eligible);
    assert!(after.can_campaign);
}

/// Rule 5: a promise holds until its instant, and from that instant this node is free to vote.
#[test]
fn a_promise_ends_at_its_instant() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let (holder, until) = a.view(now).promise.expect("b's lease is guarded");
    assert_eq!(holder, "b");
    assert!(a.view(until - NS).promise.is_some());
    assert_eq!(a.view(until).promise, None);
    let _ = a.handle(until, pre_vote(&mut b, "c", 2, 9));
    assert!(
        grants_pre_vote(&drain(&mut a), "c"),
        "free to vote the instant the promise ends"
    );
}

/// Rule 4: a pre-vote round lasts two heartbeat intervals; a failed round is retried one
/// interval (and the jitter) later, not at once.
#[test]
fn a_pre_vote_round_lasts_two_heartbeats_and_is_retried_one_later() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = campaigning(&mut b);
    let started = b.at(T + H);
    let _ = a.handle(started + H * 2 - NS, Input::Tick);
    assert_eq!(a.role(), Role::PreCandidate);
    let failed = started + H * 2;
    let _ = a.handle(failed, Input::Tick);
    assert_eq!(a.role(), Role::Follower, "the round is over");
    drain(&mut a);
    let _ = a.handle(failed + H - NS, Input::Tick);
    assert_eq!(
        a.role(),
        Role::Follower,
        "not retried within a heartbeat interval"
    );
    assert!(!published(&drain(&mut a))
        .iter()
        .any(|x| matches!(x, Body::Election { .. })));
    let _ = a.handle(failed + H + H / 10, Input::Tick);
    assert_eq!(a.role(), Role::PreCandidate, "retried by then");
}

/// Rule 4: a vote round lasts half an election timeout.
#[test]
fn a_vote_round_lasts_half_an_election_timeout() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = campaigning(&mut b);
    let started = b.at(T + H);
    let _ = a.handle(started, grant(&mut b, 1, true));
    assert_eq!(a.role(), Role::Candidate);
    let _ = a.handle(started + T / 2 - NS, Input::Tick);
    assert_eq!(a.role(), Role::Candidate);
    let _ = a.handle(started + T / 2, Input::Tick);
    assert_eq!(a.role(), Role::Follower, "the round is over");
}

/// Rule 3: a node whose own vote is a quorum leads at the next step, once its term is on disk;
/// it asks the shell for that step at once rather than at the round's deadline.
#[test]
fn a_cluster_of_one_asks_to_be_woken_at_once_to_lead() {
    let b = Bench::new(&["a"]);
    let mut a = Node::new(
        Config {
            node_id: "a".into(),
            group: "g".into(),
            members: set(&["a"]),
            priority: 1,
            eligible: true,
            healthy: true,
            timings: Timings::default(),
            beat: None,
        },
        Persistent::default(),
        b.t0,
        7,
        1 << 32,
    );
    let now = b.at(T + H);
    let _ = a.handle(now, Input::Tick);
    assert_eq!(
        a.role(),
        Role::Candidate,
        "won, but the term is not on disk yet"
    );
    assert!(
        a.poll_timeout().is_some_and(|t| t <= now),
        "woken at once: {:?} after",
        a.poll_timeout().map(|t| t - now)
    );
    drain(&mut a);
    let _ = a.handle(now, Input::Tick);
    assert_eq!(a.role(), Role::Leader);
}

/// Every node is heard every heartbeat interval; a follower through its acks, so it announces
/// itself only once two intervals pass without one.
#[test]
fn a_follower_announces_itself_only_after_two_heartbeat_intervals_without_an_ack() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, acked) = following_b(&mut b);
    let _ = a.handle(acked + H * 2 - NS, Input::Tick);
    assert_eq!(published(&drain(&mut a)), Vec::<&Body>::new());
    let _ = a.handle(acked + H * 2, Input::Tick);
    assert!(published(&drain(&mut a))
        .iter()
        .any(|x| matches!(x, Body::Presence { .. })));
}

/// Makes `a` a candidate of term 1 at `T + H` and delivers b's vote `after` the election left.
fn elected_after(b: &mut Bench, after: Duration) -> (Node, Instant) {
    let mut a = campaigning(b);
    let started = b.at(T + H);
    let _ = a.handle(started, grant(b, 1, true));
    drain(&mut a);
    let now = started + after;
    let _ = a.handle(now, grant(b, 1, false));
    assert_eq!(a.role(), Role::Leader);
    (a, now)
}

/// A leader whose lease has two heartbeat intervals or more left heartbeats at the normal rate;
/// with less, at four times the rate until a quorum answers.
#[test]
fn a_leader_hurries_its_heartbeats_only_with_less_than_two_intervals_of_lease_left() {
    // b promises its T (3 s), which supports this much of a's lease from the election on.
    let lease = Timings::default().lease_on(T, Timings::default().max_drift);
    let mut b = Bench::new(&MEMBERS);
    let (a, now) = elected_after(&mut b, lease - H * 2);
    assert_eq!(a.view(now).lease_until, Some(now + H * 2));
    assert_eq!(a.poll_timeout(), Some(now + H), "two intervals left");
    let mut b = Bench::new(&MEMBERS);
    let (a, now) = elected_after(&mut b, lease - H * 2 + MS);
    assert_eq!(
        a.poll_timeout(),
        Some(now + H / 4),
        "less than two intervals left"
    );
}

/// Rule 8: a promise that ends at this instant no longer counts towards the start-up guard's
/// length on disk.
#[test]
fn a_promise_that_ends_now_no_longer_counts() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H + H);
    let _ = a.handle(now, timed(b.heartbeat_from_b(1), &long()));
    let (_, until) = a.view(now).promise.expect("guarded");
    assert!(a.persistent().promised.is_some_and(|p| p > T));
    drain(&mut a);
    let _ = a.handle(until, b.heartbeat_from_b(2));
    let sent = drain(&mut a);
    assert!(
        sent.iter().any(|x| persists_promise(x, Some(T))),
        "the long promise ended at this instant: {sent:?}"
    );
}

/// Runs an eligible `a` (priority 1) from its start in 10 ms steps until it asks for pre-votes;
/// `rival(d)` is what b sends `d` after the start, if anything. Returns that `d`.
fn first_campaign(
    b: &mut Bench,
    rival: impl Fn(Duration) -> Option<(Candidacy, bool)>,
) -> Duration {
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    for step in 0..=(T * 2).as_millis() as u32 / 10 {
        let d = MS * 10 * step;
        let input = match rival(d) {
            Some((c, hears)) => {
                let hears: &[&str] = if hears { &["a", "c"] } else { &[] };
                b.presence("b", 0, 5, c, hears)
            }
            None => Input::Tick,
        };
        let _ = a.handle(b.at(d), input);
        if a.role() == Role::PreCandidate {
            return d;
        }
    }
    panic!("a never campaigned");
}

/// b's advert every heartbeat interval.
fn every_h(c: Candidacy, hears: bool) -> impl Fn(Duration) -> Option<(Candidacy, bool)> {
    move |d: Duration| (d.as_millis() % H.as_millis() == 0).then_some((c, hears))
}

/// Rule 11: a better-ranked rival that could win makes a node wait its stagger `W` after `T`;
/// one that withdrew, or that does not hear a quorum, does not; one that goes silent before the
/// stagger is over stops counting the moment it does.
#[test]
fn a_node_waits_the_stagger_only_for_rivals_that_could_win_while_they_are_live() {
    let s = Timings::default().stagger;
    let jitter = MS * 60;
    let mut b = Bench::new(&MEMBERS);
    let at = first_campaign(&mut b, every_h(Candidacy::Eligible, true));
    assert!(at >= T + s && at <= T + s + jitter, "a live rival: {at:?}");
    let mut b = Bench::new(&MEMBERS);
    let at = first_campaign(&mut b, every_h(Candidacy::Withdrawn, true));
    assert!(at <= T + jitter, "a rival that withdrew: {at:?}");
    let mut b = Bench::new(&MEMBERS);
    let at = first_campaign(&mut b, every_h(Candidacy::Eligible, false));
    assert!(at <= T + jitter, "a rival that hears nobody: {at:?}");
    // b is heard last 150 ms after the start: live until T + 150 ms, within the stagger.
    let mut b = Bench::new(&MEMBERS);
    let gone = MS * 150;
    let at = first_campaign(&mut b, |d| {
        (d == Duration::ZERO || d == gone).then_some((Candidacy::Eligible, true))
    });
    assert!(
        at >= T + gone && at < T + s,
        "a rival that went silent at T + 150 ms: {at:?}"
    );
}

/// "Timers": the end of a favored successor wakes no node ([`Timer`]'s `wakes`). It only
/// narrows whom the node votes for, and every vote checks the time itself; a wake-up for it
/// would be a step that does nothing but move the deadlines computed from the latest input.
#[test]
fn the_end_of_a_favored_successor_wakes_no_node() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b(&mut b);
    let advert = b.presence("c", 1, 1, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now + MS * 10, advert);
    // Off the beat of a's presences (every h from its ack at `now`).
    let resigned = now + MS * 137;
    let resign = b.resign_from_b(1, Some("c"));
    let _ = a.handle(resigned, resign);
    drain(&mut a);
    // b, resigned, ranks above c: refused only because c is favored.
    let ask = pre_vote(&mut b, "b", 2, 9);
    let _ = a.handle(resigned + MS, ask);
    assert!(!grants_pre_vote(&drain(&mut a), "b"), "c is favored");
    let favor_ends = resigned + T;
    let mut at = resigned + MS;
    while at < favor_ends + H * 2 {
        at = wake(&a, at);
        assert_ne!(at, favor_ends, "woken for the end of the favor");
        let _ = a.handle(at, Input::Tick);
        drain(&mut a);
    }
}

/// Drives `a` by its own timer alone from `from`, and returns when it first published a
/// presence saying `candidacy` (within `within`).
fn first_presence_saying(
    a: &mut Node,
    from: Instant,
    within: Duration,
    candidacy: Candidacy,
) -> Option<Instant> {
    let mut now = from;
    // Bounded: a node whose timers do not move on must fail the test, not hold it for ever.
    for _ in 0..10_000 {
        if now >= from + within {
            break;
        }
        now = a.poll_timeout()?.max(now);
        let _ = a.handle(now, Input::Tick);
        let said = drain(a).iter().any(|act| match act {
            Action::Publish(m) => matches!(
                &m.body,
                Body::Presence { advert } if advert.candidacy == candidacy
            ),
            _ => false,
        });
        if said {
            return Some(now);
        }
        now += NS;
    }
    None
}

/// The node wakes when its cooldown ends and says at once that it is eligible again, even
/// while it follows a leader and no campaign timer would wake it: the others rank it by what
/// it last said (rule 12), so a late word holds back a handover to it.
#[test]
fn the_end_of_a_cooldown_is_announced_at_its_instant() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let x = b.at(T + H + MS * 10);
    step_down(&mut a, x);
    let term = a.view(x).term;
    let heard = x + MS * 10;
    let hb = b.heartbeat_from_b(term + 1);
    let _ = a.handle(heard, hb);
    let _ = drain(&mut a);
    assert_eq!(a.view(heard).leader.as_deref(), Some("b"));
    assert_eq!(
        first_presence_saying(&mut a, heard, T * 2, Candidacy::Eligible),
        Some(x + T)
    );
}

/// The same for the start-up guard: a booting node wakes at its end and says it is eligible.
/// (`T` is not a multiple of `h` here, so no presence falls on that instant by chance.)
#[test]
fn the_end_of_the_start_up_guard_is_announced_at_its_instant() {
    let b = Bench::new(&MEMBERS);
    let timings = Timings {
        election_timeout: T + MS * 230,
        ..Timings::default()
    };
    timings.validate().expect("valid timings");
    for seed in 1..=4 {
        let mut a = seeded_with(&b, seed, timings);
        let _ = a.handle(b.t0, Input::Tick);
        let _ = drain(&mut a);
        assert_eq!(
            first_presence_saying(&mut a, b.t0, T * 2, Candidacy::Eligible),
            Some(b.at(timings.election_timeout)),
            "seed {seed}"
        );
    }
}
