//! Rule 17, leadership follows the application's health: an unhealthy node ranks below every
//! healthy member, an unhealthy leader hands over to the best healthy member that could take
//! over, and with nobody healthy somebody still leads. Losing health is a flap (rule 12), and so
//! is the recovery after it; starting unhealthy is neither.

use super::*;

const MS: Duration = Duration::from_millis(1);

/// An advert of `from`, healthy or not, hearing the other two.
fn advert_of(b: &Bench, from: &str, priority: u32, unhealthy: bool) -> Advert {
    Advert {
        priority,
        candidacy: Candidacy::Eligible,
        hears: MEMBERS
            .iter()
            .filter(|m| **m != from)
            .map(|m| m.to_string())
            .collect(),
        member_ids: b.members_of_fingerprint(),
        flapped: false,
        unhealthy,
    }
}

fn presence(b: &mut Bench, from: &str, priority: u32, unhealthy: bool) -> Input {
    let advert = advert_of(b, from, priority, unhealthy);
    b.msg(from, 0, Body::Presence { advert })
}

/// The adverts `a` sends in `actions`.
fn adverts(actions: &[Action]) -> Vec<Advert> {
    published(actions)
        .into_iter()
        .filter_map(|x| x.advert().cloned())
        .collect()
}

/// Whether voter `a` grants `candidate` (priority `priority`) a pre-vote after hearing
/// `adverts` (from, priority, unhealthy), each in order.
fn grants_after(adverts: &[(&str, u32, bool)], candidate: &str, priority: u32) -> bool {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H);
    for (from, p, unhealthy) in adverts {
        let m = presence(&mut b, from, *p, *unhealthy);
        let _ = a.handle(now, m);
    }
    drain(&mut a);
    let ask = pre_vote(&mut b, candidate, 1, priority);
    let _ = a.handle(now, ask);
    grants_pre_vote(&drain(&mut a), candidate)
}

#[test]
fn an_unhealthy_member_ranks_below_every_healthy_one() {
    // c (9) outranks b (5) and vetoes it; unhealthy, it does not.
    assert!(!grants_after(&[("c", 9, false)], "b", 5));
    assert!(grants_after(&[("c", 9, true)], "b", 5));
    // An unhealthy candidate is refused while a healthy member could win, whatever its
    // priority; among unhealthy members the priority decides again.
    assert!(!grants_after(&[("b", 5, false), ("c", 9, true)], "c", 9));
    assert!(grants_after(&[("b", 5, true), ("c", 9, true)], "c", 9));
    assert!(!grants_after(&[("b", 9, true), ("c", 5, true)], "c", 5));
}

/// Rule 12 through rule 17: a loss of health is a flap, and the recovery after it too, so the
/// recovered member ranks below a steady one for the flap window; a first advert that says
/// unhealthy (its application was not up yet) is no loss.
#[test]
fn a_members_loss_of_health_is_a_flap_but_starting_unhealthy_is_not() {
    let steady_c = [("c", 9, true), ("c", 9, false)];
    assert!(
        !grants_after(&steady_c, "b", 5),
        "c started unhealthy, then passed: still steady, it vetoes b"
    );
    let flapped_c = [("c", 9, false), ("c", 9, true), ("c", 9, false)];
    assert!(
        grants_after(&flapped_c, "b", 5),
        "c lost its health and got it back: flapped, it no longer vetoes the steady b"
    );
}

/// The recovery is a flap of its own: a member whose application was down for longer than a
/// flap window is still flapped for a window from its recovery (as this node observes it, even
/// from a member that does not say so itself).
#[test]
fn a_members_recovery_starts_a_flap_window_of_its_own() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let window = Timings::default().preempt_after.max(T) * 10;
    let t0 = b.at(T + H);
    let lost = t0 + H;
    let back = lost + window + T;
    for (at, unhealthy) in [(t0, false), (lost, true), (back, false)] {
        let m = presence(&mut b, "c", 9, unhealthy);
        let _ = a.handle(at, m);
    }
    drain(&mut a);
    let ask = pre_vote(&mut b, "b", 1, 5);
    let _ = a.handle(back, ask);
    assert!(
        grants_pre_vote(&drain(&mut a), "b"),
        "c, back from a loss longer than a flap window, still vetoed the steady b"
    );
}

#[test]
fn members_show_their_health_and_since_when_they_could_take_over() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = voter(&mut b);
    let now = b.at(T + H);
    let m = presence(&mut b, "c", 9, true);
    let _ = a.handle(now, m);
    let c = |a: &Node, at| a.peers(at).into_iter().find(|m| m.id == "c").unwrap();
    assert_eq!(c(&a, now).healthy, Some(false));
    assert_eq!(c(&a, now).eligible_since, None, "unhealthy: not eligible");
    let later = now + H;
    let m = presence(&mut b, "c", 9, false);
    let _ = a.handle(later, m);
    assert_eq!(c(&a, later).healthy, Some(true));
    assert_eq!(c(&a, later).eligible_since, Some(later));
    let b_member = a.peers(later).into_iter().find(|m| m.id == "b").unwrap();
    assert_eq!(b_member.healthy, None, "b never advertised");
}

/// Node `a` with the application check configured: unhealthy until its first pass.
fn started_unhealthy(b: &Bench) -> Node {
    let mut a = Node::new(
        Config {
            node_id: "a".into(),
            group: "g".into(),
            members: MemberSet::new("a", MEMBERS.iter().copied()).unwrap(),
            priority: 1,
            eligible: true,
            healthy: false,
            timings: Timings::default(),
            beat: None,
        },
        Persistent::default(),
        b.t0,
        7,
        1 << 32,
    );
    let _ = a.handle(b.t0, Input::Tick);
    a
}

#[test]
fn a_health_change_is_announced_at_once_and_only_a_loss_makes_a_flap() {
    let b = Bench::new(&MEMBERS);
    let mut a = started_unhealthy(&b);
    assert!(!a.view(b.t0).healthy);
    let first = adverts(&drain(&mut a));
    assert!(first.iter().all(|x| x.unhealthy && !x.flapped), "{first:?}");
    let pass = b.at(MS * 100);
    let _ = a.handle(pass, Input::SetHealth { healthy: true });
    let told = adverts(&drain(&mut a));
    assert_eq!(told.len(), 1, "announced at once: {told:?}");
    assert!(!told[0].unhealthy && !told[0].flapped, "{told:?}");
    assert!(a.view(pass).healthy);
    // The same verdict again changes nothing and sends nothing.
    let _ = a.handle(pass, Input::SetHealth { healthy: true });
    assert!(adverts(&drain(&mut a)).is_empty());
    let lost = b.at(MS * 200);
    let _ = a.handle(lost, Input::SetHealth { healthy: false });
    let told = adverts(&drain(&mut a));
    assert!(
        told.len() == 1 && told[0].unhealthy && told[0].flapped,
        "{told:?}"
    );
    // Back: healthy, and flapped for a flap window from now.
    let back = b.at(MS * 300);
    let _ = a.handle(back, Input::SetHealth { healthy: true });
    let told = adverts(&drain(&mut a));
    assert!(
        told.len() == 1 && !told[0].unhealthy && told[0].flapped,
        "{told:?}"
    );
    let window = Timings::default().preempt_after.max(T) * 10;
    let _ = a.handle(back + window - MS, Input::Tick);
    let before = a.view(back + window - MS);
    assert!(before.healthy);
    let still = adverts(&drain(&mut a));
    assert!(still.iter().all(|x| x.flapped), "{still:?}");
    let _ = a.handle(
        back + window,
        Input::SetCandidacy {
            eligible: true,
            priority: Some(2),
        },
    );
    let after = adverts(&drain(&mut a));
    assert!(
        !after.is_empty() && after.iter().all(|x| !x.flapped),
        "{after:?}"
    );
}

/// How `a` leads beside b (priority 5, acks every heartbeat) and c (priority 9, a presence
/// every 500 ms): whether each advertises unhealthy, and `a`'s health over time.
struct Scene {
    b_unhealthy: bool,
    /// c's health from each offset from `a`'s election on (before the first: the first).
    c_health: Vec<(Duration, bool)>,
    /// `a`'s verdicts, each at an offset from its election.
    a_health: Vec<(Duration, bool)>,
    maintenance: bool,
    span: Duration,
}

/// A resign: its offset from the election, its successor, the reason `a`'s own transition gives.
type Handover = (Duration, Option<String>, Reason);

/// The first resign `a` sends; `None` if it led throughout.
fn lead(scene: Scene) -> Option<Handover> {
    lead_and_send(scene).0
}

/// [`lead`], and every message `a` sent from its election to its first resign, in order.
fn lead_and_send(scene: Scene) -> (Option<Handover>, Vec<Body>) {
    // Preemption off, so that only rule 17 moves leadership here.
    let t = Timings {
        preempt_after: Duration::ZERO,
        ..Timings::default()
    };
    let mut b = Bench::new(&MEMBERS);
    let mut a = node_with("a", true, Persistent::default(), b.t0, t);
    let since = b.at(T + H);
    let c_unhealthy = |at: Duration| {
        let mut healthy = scene.c_health.first().is_none_or(|(_, h)| *h);
        for (from, h) in &scene.c_health {
            if *from <= at {
                healthy = *h;
            }
        }
        !healthy
    };
    let c = |b: &mut Bench, at: Duration| presence(b, "c", 9, c_unhealthy(at));
    let _ = a.handle(since - H, c(&mut b, Duration::ZERO));
    let _ = a.handle(since, Input::Tick);
    assert_eq!(a.role(), Role::PreCandidate);
    let _ = a.handle(since, grant(&mut b, 1, true));
    let _ = a.handle(since, grant(&mut b, 1, false));
    assert_eq!(a.role(), Role::Leader);
    if scene.maintenance {
        let _ = a.handle(since, Input::SetMaintenance { on: true });
    }
    let mut actions = drain(&mut a);
    let mut sent = Vec::new();
    let mut health = scene.a_health.into_iter().peekable();
    for step in 0..=scene.span.as_millis() as u32 / 10 {
        let now = since + MS * 10 * step;
        let mut resigned = None;
        let mut reason = None;
        let mut heartbeats = 0;
        for x in std::mem::take(&mut actions) {
            if let Action::Publish(m) = &x {
                sent.push(m.body.clone());
            }
            match x {
                Action::Publish(m) => match m.body {
                    Body::Heartbeat { .. } => {
                        // One every 10 ms step at most (h/4 while the lease is at risk): a
                        // node whose heartbeat deadline lies in the past would send one per
                        // input, and this loop would answer each for minutes.
                        heartbeats += 1;
                        assert!(
                            heartbeats <= 3,
                            "a storm of heartbeats at {:?}",
                            now - since
                        );
                        let advert = advert_of(&b, "b", 5, scene.b_unhealthy);
                        let ack = b.msg(
                            "b",
                            1,
                            Body::Ack {
                                leader: "a".into(),
                                hb_seq: m.seq,
                                guard_ms: Some(T.as_millis() as u64),
                                advert,
                            },
                        );
                        let _ = a.handle(now, ack);
                    }
                    Body::Resign { successor, .. } => resigned = Some(successor),
                    _ => {}
                },
                Action::Transition(tr) if tr.leader.is_none() => reason = Some(tr.reason),
                _ => {}
            }
        }
        if let Some(successor) = resigned {
            let at = (now - since).saturating_sub(MS * 10);
            return (Some((at, successor, reason.expect("a transition"))), sent);
        }
        let input = match health.peek() {
            Some((at, healthy)) if since + *at <= now => {
                let healthy = *healthy;
                health.next();
                Input::SetHealth { healthy }
            }
            _ if step % 50 == 0 => c(&mut b, now - since),
            _ => Input::Tick,
        };
        let _ = a.handle(now, input);
        actions = drain(&mut a);
    }
    (None, sent)
}

fn scene(a_health: Vec<(Duration, bool)>) -> Scene {
    Scene {
        b_unhealthy: false,
        c_health: Vec::new(),
        a_health,
        maintenance: false,
        span: T * 4,
    }
}

#[test]
fn an_unhealthy_leader_hands_over_to_the_best_healthy_member_at_once() {
    let r = lead(scene(vec![(T * 2, false)]));
    assert_eq!(r, Some((T * 2, Some("c".into()), Reason::Unhealthy)));
    // c unhealthy too: b, the best healthy one, although c outranks it by priority.
    let r = lead(Scene {
        c_health: vec![(Duration::ZERO, false)],
        ..scene(vec![(T * 2, false)])
    });
    assert_eq!(r, Some((T * 2, Some("b".into()), Reason::Unhealthy)));
}

/// A leader elected unhealthy (nobody healthy could win then) first leads for `T`: a
/// successor that cannot win is not handed leadership again at every election.
#[test]
fn a_leader_unhealthy_from_its_election_hands_over_after_t() {
    let r = lead(scene(vec![(Duration::ZERO, false)]));
    assert_eq!(r, Some((T, Some("c".into()), Reason::Unhealthy)));
}

#[test]
fn with_nobody_healthy_the_unhealthy_leader_goes_on_leading() {
    let r = lead(Scene {
        b_unhealthy: true,
        c_health: vec![(Duration::ZERO, false)],
        ..scene(vec![(Duration::ZERO, false)])
    });
    assert_eq!(r, None);
}

/// A member that got its health back counts from then: the leader waits until it has been
/// healthy for `T` (past its own start-up guard and steady enough to campaign at once).
#[test]
fn a_member_healthy_again_is_handed_leadership_once_healthy_for_t() {
    // The leader is unhealthy from its election; b is throughout, c until 2T, when its next
    // presence (every 500 ms) says it recovered.
    let r = lead(Scene {
        b_unhealthy: true,
        c_health: vec![(Duration::ZERO, false), (T * 2, true)],
        span: T * 5,
        ..scene(vec![(Duration::ZERO, false)])
    });
    assert_eq!(r, Some((T * 3, Some("c".into()), Reason::Unhealthy)));
}

#[test]
fn an_unhealthy_leader_in_maintenance_stays() {
    let r = lead(Scene {
        maintenance: true,
        ..scene(vec![(T * 2, false)])
    });
    assert_eq!(r, None);
}

#[test]
fn a_leader_healthy_again_stays() {
    // Unhealthy and healthy again within the same step range: the verdict that holds is healthy.
    let r = lead(scene(vec![(Duration::ZERO, false), (T / 2, true)]));
    assert_eq!(r, None);
}

/// A leader that loses its health says so at once, before the resign that may follow in the
/// same turn: the resign carries no advert, so without it the members would show the old
/// leader healthy until its first ack to the new one.
#[test]
fn a_leader_that_loses_its_health_says_so_before_it_resigns() {
    let (r, sent) = lead_and_send(scene(vec![(T * 2, false)]));
    assert_eq!(r, Some((T * 2, Some("c".into()), Reason::Unhealthy)));
    let told = sent
        .iter()
        .position(|m| m.advert().is_some_and(|x| x.unhealthy));
    let resign = sent.iter().position(|m| matches!(m, Body::Resign { .. }));
    assert!(told.is_some(), "no unhealthy advert: {sent:?}");
    assert!(resign.is_some(), "no handover to c: {sent:?}");
    assert!(told < resign, "the resign came first: {sent:?}");
}
