//! The simulator must be able to fail: protocols known to split brain are run through the same
//! harness and must be caught.

use std::collections::BTreeMap;
use std::time::Duration;

use pilot_election::election::{
    Action, Body, CommandError, Config, Input, Message, Outcome, Persistent, Role, Timings, View,
    PROTOCOL_VERSION,
};
use pilot_election::sim::scenario::{run_chaos, Scenario};
use pilot_election::sim::world::{core_factory, Factory, Protocol};
use tokio::time::Instant;

/// The reference workflow's bully: no quorum, no terms, silence is death, the highest priority
/// heard recently declares itself leader.
struct NaiveBully {
    id: String,
    group: String,
    priority: u32,
    t: Timings,
    leader: Option<String>,
    leader_heard: Instant,
    peers: BTreeMap<String, (u32, Instant)>,
    next_send: Instant,
    started: Instant,
    seq: u64,
    out: Vec<Action>,
}

impl NaiveBully {
    fn new(c: Config, now: Instant) -> NaiveBully {
        NaiveBully {
            id: c.node_id,
            group: c.group,
            priority: c.priority,
            t: c.timings,
            leader: None,
            leader_heard: now,
            peers: BTreeMap::new(),
            next_send: now,
            started: now,
            seq: 0,
            out: Vec::new(),
        }
    }

    fn send(&mut self, body: Body) {
        self.seq += 1;
        self.out.push(Action::Publish(Message {
            v: PROTOCOL_VERSION,
            group: self.group.clone(),
            from: self.id.clone(),
            term: 0,
            seq: self.seq,
            ts: 0,
            body,
            kid: None,
            sig: None,
        }));
    }

    fn is_leader(&self) -> bool {
        self.leader.as_deref() == Some(self.id.as_str())
    }
}

impl Protocol for NaiveBully {
    fn handle(&mut self, now: Instant, input: Input) -> Result<Outcome, CommandError> {
        if let Input::Message(m) = input {
            if m.from != self.id {
                let p = match m.body {
                    Body::Heartbeat { priority, .. } | Body::Presence { priority, .. } => priority,
                    _ => 0,
                };
                self.peers.insert(m.from.clone(), (p, now));
                if let Body::Heartbeat { leader, .. } = m.body {
                    if !self.is_leader() || p > self.priority {
                        self.leader = Some(leader);
                        self.leader_heard = now;
                    }
                }
            }
        }
        let silent = now >= self.leader_heard + self.t.election_timeout;
        if !self.is_leader() && silent && now >= self.started + self.t.election_timeout {
            let best_peer = self
                .peers
                .values()
                .filter(|(_, seen)| now < *seen + self.t.election_timeout)
                .map(|(p, _)| *p)
                .max();
            if best_peer.is_none_or(|p| p < self.priority) {
                self.leader = Some(self.id.clone());
            }
        }
        if now >= self.next_send {
            self.next_send = now + self.t.heartbeat;
            let body = if self.is_leader() {
                Body::Heartbeat {
                    leader: self.id.clone(),
                    timestamp: 0,
                    lease_ms: 0,
                    priority: self.priority,
                    eligible: true,
                }
            } else {
                Body::Presence {
                    priority: self.priority,
                    eligible: true,
                }
            };
            self.send(body);
        }
        Ok(Outcome::Accepted)
    }

    fn poll_action(&mut self) -> Option<Action> {
        (!self.out.is_empty()).then(|| self.out.remove(0))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_send)
    }

    fn view(&self, now: Instant) -> View {
        View {
            node_id: self.id.clone(),
            role: if self.is_leader() {
                Role::Leader
            } else {
                Role::Follower
            },
            term: 0,
            leader: self.leader.clone(),
            voted_for: None,
            // It believes in its leadership until told otherwise.
            lease_until: self.is_leader().then_some(now + Duration::from_secs(3600)),
            leader_heard_at: None,
            leader_since: None,
            priority: self.priority,
            eligible: true,
            can_campaign: true,
            shutting_down: false,
        }
    }
}

fn bully_factory() -> Factory {
    Box::new(|c: Config, _p: Persistent, now, _seed, _seq| Box::new(NaiveBully::new(c, now)))
}

fn caught(scenarios: impl Iterator<Item = Scenario>, factory: impl Fn() -> Factory) -> Vec<u64> {
    scenarios
        .filter(|s| s.size >= 3)
        .filter(|s| !run_chaos(s.clone(), factory()).violations.is_empty())
        .map(|s| s.seed)
        .collect()
}

#[test]
fn the_naive_bully_splits_brain_and_the_simulator_sees_it() {
    let seeds: Vec<Scenario> = (0..60).map(Scenario::from_seed).collect();
    let bad = caught(seeds.iter().cloned(), bully_factory);
    println!(
        "naive bully: violations in {} of {} seeds",
        bad.len(),
        seeds.iter().filter(|s| s.size >= 3).count()
    );
    assert!(
        bad.len() >= 10,
        "the harness should catch the naive bully often: {bad:?}"
    );
}

#[test]
fn the_core_with_unsafe_timings_is_caught_too() {
    // T below L*(1+r)/(1-r) + h: a new leader can be elected while the old lease still runs.
    let unsafe_timings = Timings {
        election_timeout: Duration::from_millis(1000),
        lease: Duration::from_secs(2),
        ..Timings::default()
    };
    assert!(unsafe_timings.validate().is_err());
    let scenarios = (0..100).map(|seed| Scenario {
        timings: unsafe_timings,
        quiet: false,
        ..Scenario::from_seed(seed)
    });
    let bad = caught(scenarios, core_factory);
    println!(
        "core with unsafe timings: violations in {} seeds",
        bad.len()
    );
    assert!(
        !bad.is_empty(),
        "unsafe timings must show up as lease overlaps"
    );
}
