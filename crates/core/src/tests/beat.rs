//! Rule 18: a node's heartbeats and presences fall on its beat, so that the elections of many
//! groups in one process send on the same instants (and their messages travel together), and
//! nothing on the beat comes later than it would without one.

use super::*;

const MS: Duration = Duration::from_millis(1);

/// Node `a` of a, b, c in `group`, on the beat of `epoch` (or none).
fn on_beat(b: &Bench, group: &str, epoch: Option<Instant>) -> Node {
    Node::new(
        Config {
            node_id: "a".into(),
            group: group.into(),
            members: set(&MEMBERS),
            // Above b's, so that it never hands over to b (rule 12).
            priority: 9,
            eligible: true,
            healthy: true,
            timings: Timings::default(),
            beat: epoch,
        },
        Persistent::default(),
        b.t0,
        7,
        1 << 32,
    )
}

/// Drives leader `a` by its own timer from `from` (its last step): when its next heartbeat
/// leaves, if before `until`.
fn heartbeat_after(a: &mut Node, from: Instant, until: Instant) -> Option<Instant> {
    drain(a);
    let mut now = from;
    while now <= until {
        now = wake(a, now);
        let _ = a.handle(now, Input::Tick);
        let beat = drain(a)
            .iter()
            .any(|x| matches!(x, Action::Publish(m) if matches!(m.body, Body::Heartbeat { .. })));
        if beat {
            return Some(now);
        }
    }
    None
}

/// `b`'s ack of heartbeat `hb_seq` of leader `a` in `term` (group `group`).
fn ack(b: &mut Bench, group: &str, term: u64, hb_seq: u64) -> Input {
    let Input::Message(mut m) = b.ack_from("b", term, hb_seq) else {
        unreachable!("a message")
    };
    m.group = group.into();
    Input::Message(m)
}

/// Makes `a` the leader of term 1 at `won` (b grants both rounds), then drives it until
/// `until`, b acking every heartbeat at once: the instants its heartbeats left.
fn heartbeats(
    b: &mut Bench,
    a: &mut Node,
    group: &str,
    won: Instant,
    until: Instant,
) -> Vec<Instant> {
    let _ = a.handle(won, Input::Tick);
    assert_eq!(a.role(), Role::PreCandidate, "{group}: campaigns");
    for pre_vote in [true, false] {
        let Input::Message(mut m) = grant(b, 1, pre_vote) else {
            unreachable!("a message")
        };
        m.group = group.into();
        let _ = a.handle(won, Input::Message(m));
    }
    assert_eq!(a.role(), Role::Leader, "{group}: leads");
    let mut sent = Vec::new();
    let mut now = won;
    while now < until {
        let beats: Vec<u64> = drain(a)
            .iter()
            .filter_map(|x| match x {
                Action::Publish(m) if matches!(m.body, Body::Heartbeat { .. }) => Some(m.seq),
                _ => None,
            })
            .collect();
        for seq in beats {
            sent.push(now);
            let input = ack(b, group, 1, seq);
            let _ = a.handle(now, input);
        }
        now = wake(a, now);
        let _ = a.handle(now, Input::Tick);
        assert_eq!(
            a.role(),
            Role::Leader,
            "{group}: still leads at {:?}",
            now - b.t0
        );
    }
    sent
}

/// Two elections of one process (groups g1 and g2), given one epoch and won 137 ms apart, send
/// every heartbeat after their first on the same instants, the epoch's multiples of `h`; none is
/// more than `h` after the one before. Without a beat they stay 137 ms apart for ever, which is
/// what made 1000 groups send 1000 wire messages a heartbeat interval (issue 38).
#[test]
fn the_heartbeats_of_two_groups_on_one_beat_leave_together_and_never_later() {
    let mut b = Bench::new(&MEMBERS);
    let epoch = b.at(MS * 41);
    let until = b.at(T * 4);
    let mut g1 = on_beat(&b, "g1", Some(epoch));
    let mut g2 = on_beat(&b, "g2", Some(epoch));
    let (won1, won2) = (b.at(T + H), b.at(T + H + MS * 137));
    let s1 = heartbeats(&mut b, &mut g1, "g1", won1, until);
    let s2 = heartbeats(&mut b, &mut g2, "g2", won2, until);
    for sent in [&s1, &s2] {
        assert!(sent.len() > 5, "{} heartbeats", sent.len());
        for pair in sent.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap <= H, "a gap of {gap:?} > h");
        }
        for at in &sent[1..] {
            let since = (*at - epoch).as_nanos();
            assert_eq!(
                since % H.as_nanos(),
                0,
                "{:?} after the epoch is off the beat",
                *at - epoch
            );
        }
    }
    let together: Vec<_> = s1.iter().filter(|at| **at >= s2[1]).copied().collect();
    assert_eq!(
        together,
        s2[1..],
        "after their first, both send on the same instants"
    );
    // Without the beat the two stay apart.
    let mut f1 = on_beat(&b, "g1", None);
    let mut f2 = on_beat(&b, "g2", None);
    let n1 = heartbeats(&mut b, &mut f1, "g1", won1, until);
    let n2 = heartbeats(&mut b, &mut f2, "g2", won2, until);
    assert!(
        n1.iter().all(|at| !n2.contains(at)),
        "never together without a beat"
    );
}

/// The beat never makes anything later: the next instant on it is within one period of the
/// last, wherever the epoch lies (a later one included, as a clock set back would give).
#[test]
fn the_next_beat_is_within_one_period_whatever_the_epoch() {
    let b = Bench::new(&MEMBERS);
    let base = b.at(T * 10);
    for epoch_ms in [0u64, 1, 250, 499, 500, 501, 7_777, 30_000, 31_000, 45_123] {
        let a = on_beat(&b, "g", Some(b.at(MS * epoch_ms as u32)));
        for after_ms in [0u64, 1, 499, 500, 501, 1_234] {
            let after = base + MS * after_ms as u32;
            for period in [H, H / 4] {
                let next = a.next_beat(after, period);
                assert!(
                    next > after,
                    "epoch {epoch_ms} ms, {after_ms} ms: {next:?} not after"
                );
                assert!(
                    next <= after + period,
                    "epoch {epoch_ms} ms, {after_ms} ms: more than a period"
                );
                let epoch = b.at(MS * epoch_ms as u32);
                let off = if next >= epoch {
                    next - epoch
                } else {
                    epoch - next
                };
                assert_eq!(off.as_nanos() % period.as_nanos(), 0, "off the beat");
            }
        }
    }
    let none = on_beat(&b, "g", None);
    assert_eq!(
        none.next_beat(base, H),
        base + H,
        "without a beat: one period on"
    );
}

/// A node that knows no leader announces itself on the beat too, at most `h` after its last
/// message: two groups' presences leave on the same instants.
#[test]
fn presences_fall_on_the_beat() {
    let b = Bench::new(&MEMBERS);
    let epoch = b.at(MS * 3);
    let mut sent: Vec<Vec<Instant>> = Vec::new();
    for group in ["g1", "g2"] {
        let mut a = on_beat(&b, group, Some(epoch));
        // Not a candidate, so that only presences leave.
        let _ = a.handle(
            b.t0,
            Input::SetCandidacy {
                eligible: false,
                priority: None,
            },
        );
        let mut at = Vec::new();
        let mut now = b.t0;
        while now < b.at(T * 2) {
            let presences = published(&drain(&mut a))
                .iter()
                .filter(|m| matches!(m, Body::Presence { .. }))
                .count();
            if presences > 0 {
                at.push(now);
            }
            now = wake(&a, now);
            let _ = a.handle(now, Input::Tick);
        }
        for pair in at.windows(2) {
            assert!(pair[1] - pair[0] <= H, "a gap of {:?}", pair[1] - pair[0]);
        }
        sent.push(at.into_iter().skip(2).collect());
    }
    assert!(sent[0].len() > 3);
    assert_eq!(sent[0], sent[1]);
    for at in &sent[0] {
        assert_eq!((*at - epoch).as_nanos() % H.as_nanos(), 0);
    }
}

/// What the simulator checks at every step (rule 18): a leader's `beat_check` names its last
/// heartbeat, its next one on the beat, and `h` as the most between them. `None` before
/// anything was sent.
#[test]
fn beat_check_says_when_a_leader_sends_next() {
    let mut b = Bench::new(&MEMBERS);
    let epoch = b.at(MS * 41);
    let mut a = on_beat(&b, "g", Some(epoch));
    assert_eq!(a.beat_check(), None, "nothing sent yet");
    let won = b.at(T + H);
    let sent = heartbeats(&mut b, &mut a, "g", won, won + T);
    let h = Timings::default().heartbeat;
    let (last, next, most) = a.beat_check().expect("a leader sent heartbeats");
    assert_eq!(most, h);
    assert!(sent.last().is_some_and(|s| last >= *s && last <= *s + h));
    assert!(next > last && next <= last + h, "{:?}", next - last);
    assert_eq!(
        (next - epoch).as_nanos() % h.as_nanos(),
        0,
        "the next heartbeat is on the beat"
    );
    // And it is when the next heartbeat leaves.
    assert_eq!(heartbeat_after(&mut a, last, next + h), Some(next));
}

/// Without a beat, a leader that sent something between two heartbeats (here the presence of
/// rule 17, when it loses its health before anyone could take over) still names its next
/// heartbeat in `beat_check`, which is what it sends next, not a presence `h` after that message.
#[test]
fn beat_check_names_a_leaders_next_heartbeat_after_another_message() {
    let mut b = Bench::new(&MEMBERS);
    let mut a = on_beat(&b, "g", None);
    let won = b.at(T + H);
    let _ = heartbeats(&mut b, &mut a, "g", won, won + H);
    drain(&mut a);
    let (heartbeat, next, _) = a.beat_check().expect("a leader sent heartbeats");
    let mid = heartbeat + H / 2;
    let _ = a.handle(mid, Input::SetHealth { healthy: false });
    assert!(
        drain(&mut a)
            .iter()
            .any(|x| matches!(x, Action::Publish(m) if matches!(m.body, Body::Presence { .. }))),
        "rule 17: it says at once that it lost its health"
    );
    assert_eq!(a.role(), Role::Leader, "no member could take over yet");
    let (last, after, most) = a.beat_check().expect("still sending");
    assert_eq!((last, most), (mid, H));
    assert_eq!(after, next, "its next heartbeat, not {:?}", mid + H);
    assert_eq!(heartbeat_after(&mut a, mid, next + H), Some(next));
}
