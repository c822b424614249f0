//! Seeded scenarios: chaos then healing, quiet runs under light loss, and measurements.

use std::time::Duration;

use super::checker::Violation;
use super::world::{core_factory, Factory, NetConfig, World, WorldConfig};
use crate::election::{default_priority, Input, Rng, Timings};

/// Cluster sizes the seeds cycle through.
pub const SIZES: [usize; 5] = [1, 2, 3, 5, 7];

/// What one seed is about to do; derived from the seed alone.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    pub size: usize,
    pub timings: Timings,
    /// Faults are injected between the end of warm-up and this instant (true time).
    pub faults_until: Duration,
    /// Also run the quiet 2 %-loss check.
    pub quiet: bool,
}

impl Scenario {
    pub fn from_seed(seed: u64) -> Scenario {
        let mut rng = Rng::new(seed);
        Scenario {
            seed,
            size: SIZES[(seed % SIZES.len() as u64) as usize],
            timings: Timings::default(),
            faults_until: Duration::from_secs(20 + rng.below(20)),
            quiet: seed % 4 == 0,
        }
    }

    /// The command that replays this seed alone.
    pub fn replay_command(&self) -> String {
        format!(
            "SIM_SEED={} cargo test --release --test simulation -- --nocapture replay",
            self.seed
        )
    }
}

/// What a seed did.
#[derive(Debug, Clone)]
pub struct SeedReport {
    pub scenario: Scenario,
    pub violations: Vec<Violation>,
    /// True time from healing to the first moment every node agreed on a leader holding its lease.
    pub leader_after_heal: Option<Duration>,
    pub events: u64,
    pub trace: String,
}

fn ids(size: usize, rng: &mut Rng) -> Vec<(String, u32, bool)> {
    (0..size)
        .map(|i| {
            // A mix of named and numeric ids (pilotctl's node ids are numbers).
            let id = if rng.chance(0.5) {
                format!("node-{}", i + 1)
            } else {
                format!("{}", (i as u64 + 1) * 100_000 + rng.below(100_000))
            };
            let priority = if rng.chance(0.2) {
                // Ties on priority are broken by id.
                7
            } else {
                default_priority(&id)
            };
            (id, priority, true)
        })
        .collect()
}

fn rates(size: usize, drift: f64, rng: &mut Rng) -> Vec<f64> {
    (0..size)
        .map(|_| 1.0 + (rng.unit() * 2.0 - 1.0) * drift * 0.999)
        .collect()
}

/// Builds a world for `scenario` with the given protocol.
pub fn world_for(scenario: &Scenario, factory: Factory) -> (World, Rng) {
    let mut rng = Rng::new(scenario.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xC0FFEE);
    let nodes = ids(scenario.size, &mut rng);
    let rates = rates(scenario.size, scenario.timings.max_drift, &mut rng);
    let world = World::new(
        WorldConfig {
            seed: scenario.seed,
            group: "sim".into(),
            timings: scenario.timings,
            nodes,
            rates,
        },
        factory,
    );
    (world, rng)
}

/// Runs one seed of the chaos scenario with the real core.
pub fn run_seed(seed: u64) -> SeedReport {
    run_chaos(Scenario::from_seed(seed), core_factory())
}

/// Chaos, then healing, then the liveness and steady-state checks; and, for some seeds, a quiet
/// run under 2 % loss that must see no leader change at all.
pub fn run_chaos(scenario: Scenario, factory: Factory) -> SeedReport {
    let t = scenario.timings;
    let (mut w, mut rng) = world_for(&scenario, factory);
    let n = w.size();
    let mut trace = String::new();
    let mut log = |w: &World, what: String| {
        use std::fmt::Write;
        let _ = writeln!(
            trace,
            "{:>9.3}s {what} | {}",
            w.now().as_secs_f64(),
            w.describe()
        );
    };

    // Warm-up: a clean start elects someone.
    let warmup = t.election_timeout * 3;
    w.run_until(warmup);
    log(&w, "warm-up done".into());

    let heal_at = warmup + scenario.faults_until;
    let commands_until = heal_at.saturating_sub(t.election_timeout);
    let mut restarts: Vec<(Duration, usize)> = Vec::new();
    let mut now = warmup;
    let mut restored = false;
    while now < heal_at {
        now += Duration::from_millis(200 + rng.below(2500));
        let now_c = now.min(heal_at);
        w.run_until(now_c);
        restarts.retain(|&(at, i)| {
            if at <= now_c {
                w.restart(i);
                false
            } else {
                true
            }
        });
        if now >= heal_at {
            break;
        }
        let i = rng.below(n as u64) as usize;
        let what = match rng.below(11) {
            0 => {
                w.net.loss = rng.unit() * 0.2;
                format!("loss {:.0}%", w.net.loss * 100.0)
            }
            1 => {
                w.net.duplicate = rng.unit() * 0.05;
                w.net.max_delay =
                    Duration::from_millis(5 + rng.below(3 * t.heartbeat.as_millis() as u64));
                format!(
                    "dup {:.1}%, max delay {:?}",
                    w.net.duplicate * 100.0,
                    w.net.max_delay
                )
            }
            2 => {
                let side: Vec<usize> = (0..n).filter(|_| rng.chance(0.5)).collect();
                w.partition(&side);
                format!("partition {side:?}")
            }
            3 => {
                let j = rng.below(n as u64) as usize;
                if i != j {
                    w.block(i, j);
                }
                format!("block {i}->{j}")
            }
            4 => {
                w.heal();
                "heal links".into()
            }
            5 | 6 => {
                if w.is_up(i) {
                    w.crash(i);
                    let back = now + Duration::from_millis(300 + rng.below(8000));
                    restarts.push((back, i));
                    format!("crash {i} until {:.3}s", back.as_secs_f64())
                } else {
                    continue;
                }
            }
            7 => {
                if now + t.lease * 3 < heal_at {
                    let d = t.lease.mul_f64(0.5 + rng.unit() * 2.5);
                    w.pause(i, d);
                    format!("pause {i} for {d:?}")
                } else {
                    continue;
                }
            }
            8 | 9 if now < commands_until => {
                let successor = if rng.chance(0.6) {
                    Some(w.id(rng.below(n as u64) as usize).to_string())
                } else {
                    None
                };
                let expected_term = match rng.below(3) {
                    0 => None,
                    1 => w.view(i).map(|v| v.term),
                    _ => w.view(i).map(|v| v.term.saturating_sub(1)),
                };
                let r = w.command(
                    i,
                    Input::StepDown {
                        successor: successor.clone(),
                        expected_term,
                    },
                );
                format!("step-down {i} successor={successor:?} expected={expected_term:?}: {r:?}")
            }
            10 if now < commands_until => {
                let eligible = rng.chance(0.7);
                let priority = rng.chance(0.5).then(|| rng.below(1 << 32) as u32);
                let r = w.command(i, Input::SetCandidacy { eligible, priority });
                format!("candidacy {i} eligible={eligible} priority={priority:?}: {r:?}")
            }
            _ => continue,
        };
        log(&w, what);
        if now >= commands_until && !restored {
            restore_candidacy(&mut w);
            restored = true;
        }
    }
    // Heal: everything back, nobody paused for long, every node a candidate again.
    w.run_until(heal_at);
    restore_candidacy(&mut w);
    w.heal();
    w.net = NetConfig::default();
    for i in 0..n {
        w.restart(i);
    }
    log(&w, "healed".into());

    // Liveness: T of start-up guard for restarted nodes, then 2T + N*S.
    let budget = t.election_timeout * 3 + t.stagger * n as u32;
    let deadline = heal_at + budget;
    let mut leader_after_heal = None;
    let step = Duration::from_millis(10);
    let mut at = heal_at;
    while at < deadline {
        at += step;
        w.run_until(at);
        if w.agreed_leader().is_some() {
            leader_after_heal = Some(at - heal_at);
            break;
        }
    }
    if leader_after_heal.is_none() {
        w.checker.violate(
            deadline.as_nanos() as u64,
            format!(
                "no agreed leader {budget:?} after healing: {}",
                w.describe()
            ),
        );
    }
    // Steady state: after preemption has had its time, the top-ranked node leads.
    let settle = deadline + t.preempt_after.max(t.election_timeout) + t.election_timeout * 2;
    w.run_until(settle);
    log(&w, "settled".into());
    if !t.preempt_after.is_zero() {
        match w.agreed_leader() {
            Some((i, _)) if w.is_top_ranked(i) => {}
            Some((i, _)) => w.checker.violate(
                settle.as_nanos() as u64,
                format!(
                    "steady-state leader {} is not the top-ranked node: {}",
                    w.id(i),
                    w.describe()
                ),
            ),
            None => w.checker.violate(
                settle.as_nanos() as u64,
                format!("no agreed leader in steady state: {}", w.describe()),
            ),
        }
    }
    let mut violations = w.checker.violations.clone();
    let events = w.stats.events;
    if scenario.quiet {
        violations.extend(quiet_violations(&scenario));
    }
    SeedReport {
        scenario,
        violations,
        leader_after_heal,
        events,
        trace,
    }
}

fn restore_candidacy(w: &mut World) {
    for i in 0..w.size() {
        let running_ineligible = w.view(i).is_some_and(|v| !v.eligible);
        if !w.config(i).eligible || running_ineligible {
            let _ = w.command(
                i,
                Input::SetCandidacy {
                    eligible: true,
                    priority: None,
                },
            );
        }
    }
}

/// Under 2 % loss and no other fault, once a leader is agreed it must never change.
pub fn quiet_violations(scenario: &Scenario) -> Vec<Violation> {
    let t = scenario.timings;
    let (mut w, _) = world_for(scenario, core_factory());
    w.net.loss = 0.02;
    let start = t.election_timeout * 4;
    w.run_until(start);
    let Some((leader, term)) = w.agreed_leader() else {
        return vec![Violation {
            at: w.now(),
            what: format!("quiet run: no leader after {start:?}: {}", w.describe()),
        }];
    };
    let seen = w.transitions.len();
    w.run_until(start + Duration::from_secs(60));
    let mut v = w.checker.violations.clone();
    if let Some((at, i, tr)) = w.transitions.get(seen) {
        v.push(Violation {
            at: Duration::from_nanos(*at),
            what: format!(
                "quiet run under 2% loss: leader {} (term {term}) changed at node {}: {:?}",
                w.id(leader),
                w.id(*i),
                tr
            ),
        });
    }
    v
}

/// Simulated failover: true time from the crash of a stable leader until every survivor agrees on
/// a new leader that holds its lease. `None` if none within a minute.
pub fn failover_time(seed: u64, size: usize, timings: Timings) -> Option<Duration> {
    let scenario = Scenario {
        seed,
        size,
        timings,
        faults_until: Duration::ZERO,
        quiet: false,
    };
    let (mut w, mut rng) = world_for(&scenario, core_factory());
    let settle = timings.election_timeout * 4 + Duration::from_millis(rng.below(1000));
    w.run_until(settle);
    let (leader, _) = w.agreed_leader()?;
    w.crash(leader);
    let step = Duration::from_millis(5);
    let mut at = settle;
    while at < settle + Duration::from_secs(60) {
        at += step;
        w.run_until(at);
        if w.agreed_leader().is_some() {
            return Some(at - settle);
        }
    }
    None
}

/// Publishes per heartbeat interval in a steady cluster of `size`, and deliveries (each publish
/// reaches every other node).
pub fn traffic_per_interval(size: usize, timings: Timings) -> (f64, f64) {
    let scenario = Scenario {
        seed: size as u64,
        size,
        timings,
        faults_until: Duration::ZERO,
        quiet: false,
    };
    let (mut w, _) = world_for(&scenario, core_factory());
    let warm = timings.election_timeout * 4;
    w.run_until(warm);
    let (p0, d0) = (w.stats.published, w.stats.delivered);
    let window = Duration::from_secs(10);
    w.run_until(warm + window);
    let intervals = window.as_secs_f64() / timings.heartbeat.as_secs_f64();
    (
        (w.stats.published - p0) as f64 / intervals,
        (w.stats.delivered - d0) as f64 / intervals,
    )
}
