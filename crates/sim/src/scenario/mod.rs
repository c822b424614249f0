//! Seeded scenarios. Each seed picks a family and draws everything else:
//! - **chaos**: random faults of every kind (loss, per-link loss, duplicates, delays beyond the
//!   lease, partitions, one-way links, crashes between single actions, pauses, loop stalls,
//!   clock-rate changes, graceful stops, operator commands; in some seeds a calm spell for a
//!   quorum, which must then have a leader), then healing, then liveness and the steady-state
//!   rank check;
//! - **persistent**: one node goes deaf, mute, one-way, lossy, crash-loops or has its links
//!   flap, a minority is cut off, or (five and seven nodes) a second node has a fault too; the
//!   rest, a quorum connected both ways, must have a leader within a bound and keep one;
//! - **rolling**: every node restarted in turn (graceful and `kill -9` mixed, in every order,
//!   gated on `/readyz` or not, with loss, some handovers overlapped by other faults), a plain
//!   graceful restart of the leader held to a handover without timers;
//! - **membership**: growing, shrinking and replacing members one at a time, and stray nodes,
//!   under partitions and crashes;
//! - and, for some seeds, a **quiet** run under 2 % loss that must see no leader change.
//!
//! Timings are drawn across the whole range validation accepts, often at its minimum `T`; clock
//! rates sit at ±r or anywhere within, and change mid-run. Every duration of a scenario scales
//! with `T`, so a seed means the same at any timing.

use std::time::Duration;

use super::checker::Violation;
use super::world::{
    core_factory, Build, Factory, FiringRule, NetConfig, NodeSpec, ObserverRule, RuntimeModel,
    World, WorldConfig,
};
use pilot_election_core::{
    default_priority, quorum_of, whole_ms, Advert, Announced, Body, Candidacy, Input, Message, Rng,
    Timings,
};

mod chaos;
mod figures;
mod membership;
mod persistent;
mod rolling;

pub use chaos::{observer_noise, run_chaos};
pub use figures::{
    failover_time, persistent_figure, quiet_violations, rolling_figure, traffic_per_interval,
};
pub use membership::run_membership;
pub use persistent::run_persistent;
pub use rolling::run_rolling;

/// What one seed runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Family {
    Chaos,
    Persistent(Fault),
    Rolling(RollingPlan),
    Membership(MemberPlan),
}

/// A fault that stays (rule 11's liveness promise is about these).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Hears nobody, still sends (a dead subscriber).
    Deaf,
    /// Hears nobody, and what it sends stops arriving `drain` (a multiple of `L`) later: an
    /// inbound firewall rule under TCP, whose established connections go on delivering until
    /// their requests time out, after which no new connection can be made.
    KernelDeaf { drain: f64 },
    /// Sends to nobody, still hears.
    Mute,
    /// Hears one other member only one way: that member does not hear it.
    OneWayOut,
    /// Crashes and restarts in a loop: up and down for these multiples of `T`.
    Flapping { up: f64, down: f64 },
    /// Every link of the node loses this share of messages.
    LossyLinks(f64),
    /// The node and others up to a minority are cut off from the rest, both ways.
    MinorityCut,
    /// Every link of the node goes down both ways for `down` and comes back for `up` (multiples
    /// of `T`), again and again; the node itself keeps running.
    FlappingLinks { up: f64, down: f64 },
}

impl Fault {
    pub fn name(&self) -> String {
        match self {
            Fault::Deaf => "deaf".into(),
            Fault::KernelDeaf { drain } => format!("deaf, its sends drained after {drain:.2}L"),
            Fault::Mute => "mute".into(),
            Fault::OneWayOut => "one-way".into(),
            Fault::Flapping { up, down } => format!("flapping {up:.2}T up / {down:.2}T down"),
            Fault::LossyLinks(p) => format!("lossy links {:.0}%", p * 100.0),
            Fault::MinorityCut => "minority cut off".into(),
            Fault::FlappingLinks { up, down } => {
                format!("links flapping {up:.2}T up / {down:.2}T down")
            }
        }
    }

    /// Faults that come and go, so each return costs the others a failover at most once per
    /// flap window (rule 12).
    fn flaps(&self) -> bool {
        matches!(self, Fault::Flapping { .. } | Fault::FlappingLinks { .. })
    }
}

/// A fault of a single node, drawn from every kind but the minority cut.
fn draw_node_fault(rng: &mut Rng) -> Fault {
    match rng.below(9) {
        0 => Fault::Deaf,
        8 => Fault::KernelDeaf {
            drain: rng.unit() * 1.2,
        },
        1 => Fault::Mute,
        2 => Fault::OneWayOut,
        3 => Fault::Flapping {
            up: 0.83,
            down: 0.17,
        },
        4 => Fault::Flapping {
            up: 2.7,
            down: 0.33,
        },
        5 => Fault::Flapping { up: 2.7, down: 1.3 },
        6 => Fault::FlappingLinks {
            up: [0.83, 2.7][rng.below(2) as usize],
            down: [0.17, 0.33, 1.3][rng.below(3) as usize],
        },
        _ => Fault::LossyLinks(0.1 + rng.unit() * 0.25),
    }
}

/// Which node the persistent fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Leader,
    TopRanked,
    Follower,
}

/// What a rolling restart changes, one node at a time.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Nothing: the same build and flags.
    Nothing,
    /// Each restarted node comes back with these timings; a second pass brings the old ones
    /// back (both directions of a timing change).
    Timings(Timings),
    /// Every node starts on the previous build (protocol version 2 only) and comes back on this
    /// one; a second pass goes back to the previous build when `downgrade`.
    Upgrade { downgrade: bool },
}

#[derive(Debug, Clone, PartialEq)]
pub struct RollingPlan {
    pub passes: usize,
    pub change: Change,
    /// Share of restarts that are `kill -9` instead of SIGTERM.
    pub kill_share: f64,
    /// Wait for the restarted node to be ready (`/readyz`) before the next one.
    pub readiness: bool,
    pub loss: f64,
    /// Some restarts of the leader overlap a handover in flight (see [`run_rolling`]).
    pub overlaps: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberPlan {
    /// 3 → 4 → 5 members, one at a time.
    Grow,
    /// 5 → 4 → 3.
    Shrink,
    /// Replace a member by a node with a new id: add the new one, then remove the old one.
    Replace,
    /// A node that is not a member keeps running (a replacement started early, a stale scale-up).
    Stray,
    /// Operator error: two members added at once, some nodes on the old set and some on the new
    /// (no leader is fine, two are not).
    TwoAtOnce,
}

/// What one seed is about to do; derived from the seed alone.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    pub family: Family,
    pub size: usize,
    pub timings: Timings,
    /// Chaos: faults are injected for this long after warm-up (true time).
    pub faults_until: Duration,
    /// Also run the quiet 2 %-loss check.
    pub quiet: bool,
    /// Persistent faults: which node.
    pub target: Target,
    /// Persistent faults: a second node's fault, in clusters of five and more (the rest is
    /// still a quorum).
    pub second: Option<Fault>,
    /// Each node's own timings, drawn independently (empty: every node runs `timings`).
    pub node_timings: Vec<Timings>,
}

/// Draws timings across the range validation accepts: `L/h` from just above 1 (the leader
/// renews at four times the rate all the time) to 20, `T` at validation's floor for half the seeds
/// and up to three times it otherwise, and the stagger a share of `h` or the service's fixed
/// 250 ms (the binary does not scale it with `h`, `src/cli/config.rs`). Ends of a range are where
/// timing bugs hide, so they are drawn more often than their share.
pub fn draw_timings(rng: &mut Rng) -> Timings {
    if rng.chance(0.2) {
        return Timings::default();
    }
    let h = Duration::from_millis([50, 100, 200, 500, 1000][rng.below(5) as usize]);
    let ratio = match rng.below(4) {
        0 => 1.01 + rng.unit() * 0.1,
        1 => 15.0 + rng.unit() * 5.0,
        _ => 1.01 + rng.unit() * 18.99,
    };
    // Whole milliseconds, as messages carry them and validation asks.
    let lease = whole_ms(h.mul_f64(ratio));
    let max_drift = [0.0, 0.01, 0.05, 0.05, 0.1, 0.2][rng.below(6) as usize];
    let stagger = if rng.chance(0.3) {
        Timings::default().stagger
    } else {
        h.mul_f64(0.1 + rng.unit() * 0.9)
    };
    let mut t = Timings {
        heartbeat: h,
        lease,
        election_timeout: lease,
        stagger,
        preempt_after: Duration::ZERO,
        max_drift,
    };
    let min = t.min_election_timeout();
    t.election_timeout = match rng.below(4) {
        // Validation's floor, itself rounded up to the next whole millisecond.
        0 | 1 => min,
        2 => whole_ms(min.mul_f64(1.0 + rng.unit() * 0.5)),
        _ => whole_ms(min.mul_f64(1.5 + rng.unit() * 1.5)),
    };
    t.preempt_after = match rng.below(4) {
        0 => Duration::ZERO,
        1 => t.election_timeout,
        2 => t.election_timeout.mul_f64(1.7),
        _ => t.election_timeout * 3,
    };
    t.validate().expect("drawn timings are valid");
    t
}

impl Scenario {
    pub fn from_seed(seed: u64) -> Scenario {
        let mut rng = Rng::new(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x5CE7A210);
        let timings = draw_timings(&mut rng);
        let t = timings.election_timeout;
        let pick = |rng: &mut Rng, sizes: &[usize]| sizes[rng.below(sizes.len() as u64) as usize];
        let family = match seed % 8 {
            0..=2 => Family::Chaos,
            3 | 4 => Family::Persistent(if rng.chance(0.12) {
                Fault::MinorityCut
            } else {
                draw_node_fault(&mut rng)
            }),
            5 | 6 => Family::Rolling(RollingPlan {
                passes: 1 + rng.below(2) as usize,
                change: match rng.below(6) {
                    0 | 1 => Change::Timings(draw_timings(&mut rng)),
                    2 => Change::Upgrade {
                        downgrade: rng.chance(0.5),
                    },
                    _ => Change::Nothing,
                },
                kill_share: [0.0, 0.0, 0.2, 0.5][rng.below(4) as usize],
                readiness: rng.chance(0.7),
                loss: [0.0, 0.0, 0.02, 0.05][rng.below(4) as usize],
                overlaps: rng.chance(0.5),
            }),
            _ => Family::Membership(match rng.below(5) {
                0 => MemberPlan::Grow,
                1 => MemberPlan::Shrink,
                2 => MemberPlan::Replace,
                3 => MemberPlan::Stray,
                _ => MemberPlan::TwoAtOnce,
            }),
        };
        let size = match &family {
            Family::Chaos => pick(&mut rng, &[1, 2, 3, 3, 4, 5, 5, 7]),
            Family::Persistent(_) => pick(&mut rng, &[3, 3, 4, 5, 5, 7]),
            Family::Rolling(_) => pick(&mut rng, &[2, 3, 3, 5, 5]),
            Family::Membership(MemberPlan::Shrink) => 5,
            Family::Membership(_) => pick(&mut rng, &[3, 3, 5]),
        };
        // Nodes on timings of their own, each drawn alone: what a configuration mistake on one
        // node, or a timing change stopped half way, leaves running (rules 5 and 6 make any mix
        // safe). Rolling restarts change timings by their plan instead.
        let mixed = !matches!(family, Family::Rolling(_)) && rng.chance(0.3);
        // Each binary fixes `r`, so nodes of one build differ in `h`, `L`, `T`, `S` and `P`
        // only; chaos seeds draw `r` per node too (a later build may change it), which only
        // safety is judged on: a node whose clock may drift more stretches its promises (rule
        // 5), and the persistent family's leaderless shares are not calibrated for that.
        let same_drift = !matches!(family, Family::Chaos);
        let node_timings = if mixed {
            (0..size)
                .map(|_| {
                    let mut t = draw_timings(&mut rng);
                    if same_drift && t.max_drift != timings.max_drift {
                        t.max_drift = timings.max_drift;
                        t.election_timeout = t.election_timeout.max(t.min_election_timeout());
                    }
                    t
                })
                .collect()
        } else {
            Vec::new()
        };
        Scenario {
            seed,
            size,
            timings,
            node_timings,
            faults_until: t.mul_f64(7.0 + rng.unit() * 7.0),
            quiet: seed % 16 == 0,
            target: match rng.below(3) {
                0 => Target::Leader,
                1 => Target::TopRanked,
                _ => Target::Follower,
            },
            second: match &family {
                Family::Persistent(f) if *f != Fault::MinorityCut && size >= 5 => {
                    rng.chance(0.35).then(|| draw_node_fault(&mut rng))
                }
                _ => None,
            },
            family,
        }
    }

    /// The slowest of the timings any node may run, field by field: what time bounds are made
    /// of (a rolling timing change counts its new timings too).
    pub fn envelope(&self) -> Timings {
        let mut all = if self.node_timings.is_empty() {
            vec![self.timings]
        } else {
            self.node_timings.clone()
        };
        if let Family::Rolling(RollingPlan {
            change: Change::Timings(t),
            ..
        }) = &self.family
        {
            all.push(*t);
        }
        super::world::slowest(&all)
    }

    /// Whether every node hands over to a better-ranked one (`P > 0` everywhere).
    pub fn every_node_preempts(&self) -> bool {
        !self.timings.preempt_after.is_zero()
            && self.node_timings.iter().all(|t| !t.preempt_after.is_zero())
    }

    /// The command that replays this seed alone.
    pub fn replay_command(&self) -> String {
        format!(
            "SIM_SEED={} cargo test --release -p pilot-election-sim --test simulation -- --nocapture replay",
            self.seed
        )
    }

    /// One line saying what the seed runs.
    pub fn summary(&self) -> String {
        let t = &self.timings;
        let family = match &self.family {
            Family::Chaos => "chaos".to_string(),
            Family::Persistent(f) => format!(
                "persistent {} ({:?}){}",
                f.name(),
                self.target,
                self.second
                    .map(|s| format!(" and {} on another node", s.name()))
                    .unwrap_or_default()
            ),
            Family::Rolling(p) => format!(
                "rolling x{}{} kill {:.0}% {} loss {:.0}%{}",
                p.passes,
                match &p.change {
                    Change::Nothing => String::new(),
                    Change::Timings(t) => format!(
                        " to h={:?} L={:?} T={:?} S={:?} r={}",
                        t.heartbeat, t.lease, t.election_timeout, t.stagger, t.max_drift
                    ),
                    Change::Upgrade { downgrade } => format!(
                        " upgrading from protocol version 2{}",
                        if *downgrade { " and back" } else { "" }
                    ),
                },
                p.kill_share * 100.0,
                if p.readiness {
                    "ready-gated"
                } else {
                    "ungated"
                },
                p.loss * 100.0,
                if p.overlaps { " overlapping" } else { "" }
            ),
            Family::Membership(p) => format!("membership {p:?}"),
        };
        let mixed = if self.node_timings.is_empty() {
            String::new()
        } else {
            let each: Vec<String> = self
                .node_timings
                .iter()
                .map(|t| {
                    format!(
                        "{:?}/{:?}/{:?}/{:?}/{:?}/r{}",
                        t.heartbeat,
                        t.lease,
                        t.election_timeout,
                        t.stagger,
                        t.preempt_after,
                        t.max_drift
                    )
                })
                .collect();
            format!(", per node h/L/T/S/P/r: {}", each.join(" "))
        };
        format!(
            "{family}, {} nodes, h={:?} L={:?} T={:?} S={:?} P={:?} r={}{mixed}",
            self.size,
            t.heartbeat,
            t.lease,
            t.election_timeout,
            t.stagger,
            t.preempt_after,
            t.max_drift
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
    /// Persistent faults: share of the observed time the connected quorum had no agreed leader.
    pub leaderless_share: Option<f64>,
    /// Rolling restarts: leaderless time after each restart of the leader.
    pub leader_restart_gaps: Vec<Duration>,
    pub events: u64,
    /// Scheduled firings that ran (rule 19), each once.
    pub firings: usize,
    /// Messages after which the observer named a leader, each checked.
    pub observed: u64,
    pub trace: String,
}

impl SeedReport {
    fn new(scenario: Scenario) -> SeedReport {
        SeedReport {
            scenario,
            violations: Vec::new(),
            leader_after_heal: None,
            leaderless_share: None,
            leader_restart_gaps: Vec::new(),
            events: 0,
            firings: 0,
            observed: 0,
            trace: String::new(),
        }
    }
}

/// Node ids: a mix of names and numbers (pilotctl's node ids are numbers).
fn node_ids(count: usize, rng: &mut Rng) -> Vec<(String, u32)> {
    (0..count)
        .map(|i| {
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
            (id, priority)
        })
        .collect()
}

/// Clock rates: pinned at ±r, or anywhere within.
fn draw_rate(drift: f64, rng: &mut Rng) -> f64 {
    match rng.below(3) {
        0 => 1.0 + drift,
        1 => 1.0 - drift,
        _ => 1.0 + (rng.unit() * 2.0 - 1.0) * drift,
    }
}

/// Builds a world of `specs` for `scenario` with the given protocol. Each clock drifts within
/// its own node's `r`.
fn world_of(scenario: &Scenario, specs: Vec<NodeSpec>, factory: Factory, rng: &mut Rng) -> World {
    let rates = specs
        .iter()
        .map(|s| draw_rate(s.timings.unwrap_or(scenario.timings).max_drift, rng))
        .collect();
    let mut w = World::new(
        WorldConfig {
            seed: scenario.seed,
            group: "sim".into(),
            timings: scenario.timings,
            nodes: specs,
            rates,
            // As the service runs: on a beat (rule 18); without one in a fifth of the seeds, as
            // a build before it ran.
            beat: scenario.seed % 5 != 0,
        },
        factory,
    );
    // Every world runs a schedule (rule 19), a firing every T/2 to 2T: many fall into the
    // failovers the faults cause. Drawn from the seed, not the world's stream, so that the
    // faults of a seed stay what they were.
    let period = scenario
        .timings
        .election_timeout
        .mul_f64(0.5 + (scenario.seed % 4) as f64 * 0.5);
    w.schedule_firings(Some(period), FiringRule::Quorum);
    // And an observer, which hears every member with delays of its own (issue 42, item 2).
    w.observe(ObserverRule::Correct);
    w
}

/// Builds the plain world of `scenario.size` nodes, all members of one set.
pub fn world_for(scenario: &Scenario, factory: Factory) -> (World, Rng) {
    let mut rng = Rng::new(scenario.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xC0FFEE);
    let upgrade = matches!(
        &scenario.family,
        Family::Rolling(RollingPlan {
            change: Change::Upgrade { .. },
            ..
        })
    );
    let specs = node_ids(scenario.size, &mut rng)
        .into_iter()
        .enumerate()
        .map(|(k, (id, p))| NodeSpec {
            timings: scenario.node_timings.get(k).copied(),
            build: if upgrade {
                Build::Previous
            } else {
                Build::Current
            },
            ..NodeSpec::new(id, p)
        })
        .collect();
    let w = world_of(scenario, specs, factory, &mut rng);
    (w, rng)
}

/// A time-stamped log of what a scenario did, for the replay trace.
struct Trace(String);

impl Trace {
    fn log(&mut self, w: &World, what: impl AsRef<str>) {
        use std::fmt::Write;
        let _ = writeln!(
            self.0,
            "{:>9.3}s {} | {}",
            w.now().as_secs_f64(),
            what.as_ref(),
            w.describe()
        );
    }
}

/// Runs one seed with the real core.
pub fn run_seed(seed: u64) -> SeedReport {
    run_scenario(Scenario::from_seed(seed), &core_factory)
}

/// Runs a scenario of any family with the protocol `factory` builds.
pub fn run_scenario(scenario: Scenario, factory: &dyn Fn() -> Factory) -> SeedReport {
    let mut report = match scenario.family.clone() {
        Family::Chaos => run_chaos(scenario, factory()),
        Family::Persistent(f) => run_persistent(scenario, f, factory()),
        Family::Rolling(p) => run_rolling(scenario, p, factory()),
        Family::Membership(p) => run_membership(scenario, p, factory()),
    };
    if report.scenario.quiet {
        let q = quiet_violations(&report.scenario, factory());
        report.violations.extend(q);
    }
    report
}

/// Runs in steps of `step` until `cond` holds or `limit` passes; how long it took.
fn run_until_cond(
    w: &mut World,
    limit: Duration,
    step: Duration,
    mut cond: impl FnMut(&World) -> bool,
) -> Option<Duration> {
    let start = w.now();
    while w.now() < start + limit {
        let next = w.now() + step;
        w.run_until(next);
        if cond(w) {
            return Some(w.now() - start);
        }
    }
    None
}

/// A sampling step fine enough for the timings.
fn sample_step(t: &Timings) -> Duration {
    (t.heartbeat / 20).max(Duration::from_millis(2))
}

/// What the runtime model does in seeds that exercise it: fsyncs of up to 5 ms, and now and
/// then a stall of the loop of up to 1.5 leases.
fn busy_runtime(t: &Timings, rng: &mut Rng) -> RuntimeModel {
    RuntimeModel {
        fsync_max: Duration::from_millis(5),
        stall_chance: [0.0, 0.001, 0.005][rng.below(3) as usize],
        stall_max: t.lease.mul_f64(1.5),
        ..RuntimeModel::default()
    }
}

/// Puts `v` in a random order drawn from `rng` (Fisher-Yates, from the back).
fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for k in (1..v.len()).rev() {
        v.swap(k, rng.below(k as u64 + 1) as usize);
    }
}
