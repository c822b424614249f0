//! Rule 16, maintenance: no campaign of a node's own and no preemption while it is on; a member
//! a leader's resign names still campaigns, and votes are answered as ever.

use super::*;

/// Whether `actions` hold a pre-vote or vote request of `a`'s own.
fn campaigns(actions: &[Action]) -> bool {
    published(actions)
        .iter()
        .any(|x| matches!(x, Body::Election { candidate, .. } if candidate == "a"))
}

/// Eligible node `a`, started at `t0`, in maintenance from the start (as a shell that kept
/// maintenance on disk makes it).
fn in_maintenance(b: &Bench) -> Node {
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let _ = a.handle(b.t0, Input::SetMaintenance { on: true });
    assert!(a.view(b.t0).maintenance);
    drain(&mut a);
    a
}

/// Runs `a` from `from` for `span`, waking it whenever it asks (and at least every `H`), as the
/// runtime does; true if it campaigned. Every wake-up it asks for lies ahead of it, so a node
/// that never campaigns does not spin either.
fn run(a: &mut Node, from: Instant, span: Duration) -> bool {
    let mut now = from;
    let mut campaigned = false;
    while now < from + span {
        let _ = a.handle(now, Input::Tick);
        campaigned |= campaigns(&drain(a));
        let next = a.poll_timeout().unwrap_or(now + H).min(now + H);
        assert!(next > now, "asked to wake at {next:?}, not after {now:?}");
        now = next;
    }
    campaigned
}

#[test]
fn a_node_in_maintenance_never_campaigns_of_its_own_and_does_once_it_ends() {
    let b = Bench::new(&MEMBERS);
    let mut a = in_maintenance(&b);
    assert!(!run(&mut a, b.t0, T * 10), "campaigned in maintenance");
    assert_eq!(a.role(), Role::Follower);
    assert!(!a.view(b.at(T * 10)).can_campaign);
    let end = b.at(T * 10);
    let _ = a.handle(end, Input::SetMaintenance { on: false });
    drain(&mut a);
    assert!(a.view(end).can_campaign);
    assert!(
        run(&mut a, end, T * 2),
        "no campaign once maintenance ended"
    );
}

/// A node whose election timer ran out while its loop was busy: maintenance arriving as the
/// next input holds the campaign back, although its timers are due at the same instant.
#[test]
fn maintenance_given_when_the_timer_is_due_starts_no_campaign_in_that_step() {
    let b = Bench::new(&MEMBERS);
    let mut a = node_at("a", true, Persistent::default(), b.t0);
    let _ = a.handle(b.t0, Input::Tick);
    drain(&mut a);
    let late = b.at(T * 3);
    let _ = a.handle(late, Input::SetMaintenance { on: true });
    assert!(
        !campaigns(&drain(&mut a)),
        "campaigned in the step that began maintenance"
    );
    assert_eq!(a.role(), Role::Follower);
}

/// [`in_maintenance`], following leader b of term 1 since `T + H` (returned).
fn following_b_in_maintenance(b: &mut Bench) -> (Node, Instant) {
    let mut a = in_maintenance(b);
    let now = b.at(T + H);
    let hb = b.heartbeat_from_b(1);
    let _ = a.handle(now, hb);
    drain(&mut a);
    assert_eq!(a.view(now).leader.as_deref(), Some("b"));
    (a, now)
}

#[test]
fn a_leaders_silence_starts_no_campaign_in_maintenance() {
    let mut b = Bench::new(&MEMBERS);
    let (mut a, now) = following_b_in_maintenance(&mut b);
    // b dies: a forgets it after T and waits, however long.
    assert!(!run(&mut a, now, T * 10));
    assert_eq!(a.view(now + T * 10).leader, None);
}

#[test]
fn a_member_named_by_a_resign_campaigns_in_maintenance_and_only_it() {
    for (named, expected) in [(Some("a"), true), (Some("c"), false), (None, false)] {
        let mut b = Bench::new(&MEMBERS);
        let (mut a, now) = following_b_in_maintenance(&mut b);
        let resign = b.resign_from_b(1, named);
        let _ = a.handle(now, resign);
        let at_once = campaigns(&drain(&mut a));
        assert_eq!(at_once, expected, "named {named:?}: campaigned at once");
        if !expected {
            assert!(
                !run(&mut a, now, T * 5),
                "named {named:?}: campaigned later"
            );
        }
    }
}

/// The favored window is the named member's own, and it ends at `T` exactly: a node that
/// favors another member stays held, and the named one is free only inside its window.
#[test]
fn only_the_named_member_is_free_of_maintenance_and_only_for_t() {
    for named in ["a", "c"] {
        let mut b = Bench::new(&MEMBERS);
        let (mut a, now) = following_b_in_maintenance(&mut b);
        let resign = b.resign_from_b(1, Some(named));
        let _ = a.handle(now, resign);
        drain(&mut a);
        let ms = Duration::from_millis(1);
        assert_eq!(a.view(now).can_campaign, named == "a", "named {named}");
        assert_eq!(
            a.view(now + T - ms).can_campaign,
            named == "a",
            "named {named}"
        );
        assert!(!a.view(now + T).can_campaign, "named {named}: free past T");
    }
}

#[test]
fn maintenance_abandons_a_round_of_its_own() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = campaigning(&mut b);
    let now = b.at(T + H);
    let _ = a.handle(now, Input::SetMaintenance { on: true });
    assert_eq!(a.role(), Role::Follower);
    drain(&mut a);
    // A grant of the abandoned pre-vote round starts no election.
    let _ = a.handle(now, grant(&mut b, 1, true));
    assert!(!campaigns(&drain(&mut a)));
    assert_eq!(a.term(), 0, "the term was raised");
}

#[test]
fn a_voter_in_maintenance_answers_as_ever() {
    let mut b = Bench::new(&MEMBERS);
    let mut plain = voter(&mut b);
    let mut paused = voter(&mut b);
    let _ = paused.handle(b.at(T + H), Input::SetMaintenance { on: true });
    drain(&mut paused);
    let now = b.at(T + H * 2);
    let ask = pre_vote(&mut b, "c", 1, 2);
    let _ = plain.handle(now, ask.clone());
    let _ = paused.handle(now, ask);
    assert!(grants_pre_vote(&drain(&mut plain), "c"));
    assert!(grants_pre_vote(&drain(&mut paused), "c"));
}

#[test]
fn a_step_down_in_maintenance_names_the_best_successor_or_is_refused() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = leader(&mut b);
    let now = b.at(T + H + Duration::from_millis(10));
    let _ = a.handle(now, Input::SetMaintenance { on: true });
    drain(&mut a);
    let step_down = Input::StepDown {
        successor: None,
        expected_term: None,
    };
    // Nobody has advertised a candidacy yet: nobody could take over.
    assert_eq!(
        a.handle(now, step_down.clone()),
        Err(CommandError::NoSuccessorInMaintenance)
    );
    assert!(
        a.view(now).is_leader_at(now),
        "a refused step-down resigned"
    );
    let c = b.presence("c", 1, 2, Candidacy::Eligible, &["a", "b"]);
    let _ = a.handle(now, c);
    drain(&mut a);
    assert_eq!(
        a.handle(now, step_down),
        Ok(Outcome::SteppedDown {
            term: 1,
            successor: Some("c".into())
        })
    );
    assert!(published(&drain(&mut a)).iter().any(|x| matches!(
        x,
        Body::Resign { successor: Some(s), .. } if s == "c"
    )));
}
