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
    core_factory, Build, Factory, NetConfig, NodeSpec, RuntimeModel, World, WorldConfig,
};
use pilot_election_core::{default_priority, quorum_of, Input, Rng, Timings};

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
    let lease = h.mul_f64(ratio);
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
        // Validation's floor, rounded up to the next nanosecond.
        0 | 1 => min + Duration::from_nanos(1),
        2 => min.mul_f64(1.0 + rng.unit() * 0.5),
        _ => min.mul_f64(1.5 + rng.unit() * 1.5),
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
    World::new(
        WorldConfig {
            seed: scenario.seed,
            group: "sim".into(),
            timings: scenario.timings,
            nodes: specs,
            rates,
        },
        factory,
    )
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

/// Since when, as seen at the chaos steps, the network as a whole, each node and each link have
/// been free of faults, so that a quorum connected both ways on timely links can be held to the
/// liveness promise (docs/protocol.md, "What it promises") in the middle of the chaos and not
/// only after healing. A node counts when it is up, unpaused, not stopping, not about to crash,
/// eligible, not stalled and left alone by the operator; a link when it is open both ways
/// without extra loss or delay; the network when it loses nothing and stays within the timely
/// delay.
struct Calm {
    net: Option<Duration>,
    /// Per node: since when, in which incarnation.
    nodes: Vec<Option<(Duration, u64)>>,
    links: Vec<Vec<Option<Duration>>>,
}

impl Calm {
    fn new(n: usize) -> Calm {
        Calm {
            net: None,
            nodes: vec![None; n],
            links: vec![vec![None; n]; n],
        }
    }

    /// Looks at the world now; `touched` was just given an operator command.
    fn update(&mut self, w: &World, touched: Option<usize>) {
        let now = w.now();
        let timely = w.timely_net();
        let net_ok = w.net.loss == 0.0
            && w.net.long_delay_chance == 0.0
            && w.net.max_delay <= timely.max_delay;
        self.net = net_ok.then(|| self.net.unwrap_or(now));
        for i in 0..w.size() {
            let ok = w.is_up(i)
                && !w.is_paused(i)
                && !w.is_stopping(i)
                && !w.crash_armed(i)
                && w.config(i).eligible
                && w.view(i).is_some_and(|v| v.eligible)
                && w.stalled_until(i) <= now
                && touched != Some(i);
            let inc = w.incarnation(i);
            self.nodes[i] = match self.nodes[i] {
                _ if !ok => None,
                Some((since, seen)) if seen == inc && w.stalled_until(i) <= since => {
                    Some((since, seen))
                }
                _ => Some((now, inc)),
            };
        }
        for a in 0..w.size() {
            for b in 0..w.size() {
                let ok = a == b
                    || (w.link_up(a, b)
                        && !w.net.link_loss.contains_key(&(a, b))
                        && !w.net.link_delay.contains_key(&(a, b)));
                self.links[a][b] = ok.then(|| self.links[a][b].unwrap_or(now));
            }
        }
    }

    /// Since when some quorum of the nodes has been calm with every link among them, the
    /// longest-calm one; `None` if no quorum is.
    fn quorum_since(&self, quorum: usize) -> Option<Duration> {
        let n = self.nodes.len();
        let net = self.net?;
        (0u32..1 << n)
            .filter(|m| m.count_ones() as usize >= quorum)
            .filter_map(|m| {
                let members: Vec<usize> = (0..n).filter(|&i| m & (1 << i) != 0).collect();
                let mut since = net;
                for &a in &members {
                    since = since.max(self.nodes[a]?.0);
                    for &b in &members {
                        since = since.max(self.links[a][b]?);
                    }
                }
                Some(since)
            })
            .min()
    }
}

/// Chaos, then healing, then the liveness and steady-state checks.
pub fn run_chaos(scenario: Scenario, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let (mut w, mut rng) = world_for(&scenario, factory);
    w.runtime = busy_runtime(&t, &mut rng);
    let n = w.size();
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());

    // Warm-up: a clean start elects someone.
    let warmup = te * 3 + t.stagger * n as u32;
    w.run_until(warmup);
    trace.log(&w, "warm-up done");

    // A quorum calm this long has a leader: T of start-up guard, the guard and lease of a
    // leader outside it, a round with every rank's stagger, and a bounded veto (T).
    let calm_bound = te * 4 + t.stagger * n as u32 + t.lease * 2;
    // In some seeds a quorum gets a calm spell in the middle of the chaos: its links and the
    // network are made whole and the faults go on around it, on the other nodes only.
    let spell = rng.chance(0.4).then(|| {
        let mut order: Vec<usize> = (0..n).collect();
        shuffle(&mut order, &mut rng);
        order.truncate(quorum_of(n));
        let start = warmup + scenario.faults_until.mul_f64(rng.unit() * 0.5);
        (start, start + calm_bound.mul_f64(1.5), order)
    });
    let heal_at =
        warmup + scenario.faults_until + spell.as_ref().map_or(Duration::ZERO, |s| s.1 - s.0);
    let commands_until = heal_at.saturating_sub(te);
    let mut restarts: Vec<(Duration, usize)> = Vec::new();
    let mut now = warmup;
    let mut restored = false;
    // Not begun, on, over.
    let mut spell_state = 0;
    let stall_chance = w.runtime.stall_chance;
    let mut calm = Calm::new(n);
    let mut touched = None;
    let mut calm_reported = false;
    while now < heal_at {
        now += te.mul_f64(0.07 + rng.unit() * 0.8);
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
        // The spell's quorum, while it lasts.
        let calm_q: Option<&[usize]> = spell
            .as_ref()
            .filter(|(from, until, _)| now_c >= *from && now_c < *until)
            .map(|(_, _, q)| q.as_slice());
        match (calm_q, spell_state) {
            (Some(q), 0) => {
                spell_state = 1;
                calm_spell(&mut w, q);
                trace.log(&w, format!("calm spell for {q:?}"));
            }
            (None, 1) => {
                spell_state = 2;
                w.runtime.stall_chance = stall_chance;
                trace.log(&w, "calm spell over");
            }
            _ => {}
        }
        calm.update(&w, touched.take());
        let claimless = w.checker.claimless_since.map(Duration::from_nanos);
        if let (Some(g), Some(c)) = (calm.quorum_since(quorum_of(n)), claimless) {
            if w.now() >= g.max(c) + calm_bound && !calm_reported {
                let what = format!(
                    "a quorum connected both ways on timely links for {:?} had no leader for \
                     {:?} (bound {calm_bound:?}): {}",
                    w.now() - g,
                    w.now() - c,
                    w.describe()
                );
                w.checker.violate(w.now().as_nanos() as u64, what);
                calm_reported = true;
            }
        }
        if now >= heal_at {
            break;
        }
        let outside: Vec<usize> = (0..n)
            .filter(|j| calm_q.is_none_or(|q| !q.contains(j)))
            .collect();
        if outside.is_empty() {
            continue;
        }
        let i = outside[rng.below(outside.len() as u64) as usize];
        let event = rng.below(20);
        // During a spell the network stays timely, and only nodes outside the quorum are hit.
        if calm_q.is_some() && matches!(event, 0 | 1 | 13) {
            continue;
        }
        let what = match event {
            0 => {
                w.net.loss = rng.unit() * 0.2;
                format!("loss {:.0}%", w.net.loss * 100.0)
            }
            1 => {
                w.net.duplicate = rng.unit() * 0.05;
                w.net.max_delay = Duration::from_millis(5) + t.heartbeat.mul_f64(rng.unit() * 3.0);
                format!(
                    "dup {:.1}%, max delay {:?}",
                    w.net.duplicate * 100.0,
                    w.net.max_delay
                )
            }
            2 => {
                let side: Vec<usize> = outside
                    .iter()
                    .copied()
                    .filter(|_| rng.chance(0.5))
                    .collect();
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
                    if rng.chance(0.3) {
                        let k = rng.below(4) as u32;
                        w.crash_after_actions(i, k);
                        let back = now + te.mul_f64(0.1 + rng.unit() * 2.5);
                        restarts.push((back, i));
                        format!(
                            "crash {i} after {k} more actions, back at {:.3}s",
                            back.as_secs_f64()
                        )
                    } else {
                        w.crash(i);
                        let back = now + te.mul_f64(0.1 + rng.unit() * 2.5);
                        restarts.push((back, i));
                        format!("crash {i} until {:.3}s", back.as_secs_f64())
                    }
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
                touched = Some(i);
                format!("step-down {i} successor={successor:?} expected={expected_term:?}: {r:?}")
            }
            10 if now < commands_until => {
                let eligible = rng.chance(0.7);
                let priority = rng.chance(0.5).then(|| rng.below(1 << 32) as u32);
                let r = w.command(i, Input::SetCandidacy { eligible, priority });
                touched = Some(i);
                format!("candidacy {i} eligible={eligible} priority={priority:?}: {r:?}")
            }
            11 => {
                let r = if rng.chance(0.5) {
                    1.0 + t.max_drift * if rng.chance(0.5) { 1.0 } else { -1.0 }
                } else {
                    draw_rate(t.max_drift, &mut rng)
                };
                w.set_rate(i, r);
                format!("clock of {i} at rate {r:.4}")
            }
            12 => {
                let (a, b) = (i, rng.below(n as u64) as usize);
                if a != b {
                    let p = rng.unit() * 0.6;
                    w.net.link_loss.insert((a, b), p);
                    format!("link {a}->{b} loses {:.0}%", p * 100.0)
                } else {
                    continue;
                }
            }
            13 => {
                w.net.long_delay_chance = rng.unit() * 0.03;
                w.net.long_delay = t.lease.mul_f64(1.0 + rng.unit() * 1.5);
                format!(
                    "{:.1}% of messages delayed up to {:?}",
                    w.net.long_delay_chance * 100.0,
                    w.net.long_delay
                )
            }
            14 => {
                if w.is_up(i) && !w.is_stopping(i) {
                    w.stop(i);
                    let back = now + te.mul_f64(0.2 + rng.unit() * 2.0);
                    restarts.push((back, i));
                    format!("SIGTERM {i}, back at {:.3}s", back.as_secs_f64())
                } else {
                    continue;
                }
            }
            15 => {
                if rng.chance(0.5) {
                    w.deafen(i);
                    format!("deafen {i}")
                } else {
                    w.mute(i);
                    format!("mute {i}")
                }
            }
            16 => {
                let j = rng.below(n as u64) as usize;
                if i != j {
                    let d = te.mul_f64(0.2 + rng.unit() * 1.3);
                    w.net.link_delay.insert((i, j), d);
                    format!("link {i}->{j} slow by {d:?}")
                } else {
                    w.net.link_delay.clear();
                    "slow links back to normal".into()
                }
            }
            17 | 18 => {
                // The leader is the node whose faults matter most: cut it off, one way or both.
                let Some(l) = w.current_leader().filter(|l| outside.contains(l)) else {
                    continue;
                };
                match rng.below(3) {
                    0 => {
                        w.mute(l);
                        format!("mute the leader {l}")
                    }
                    1 => {
                        w.deafen(l);
                        format!("deafen the leader {l}")
                    }
                    _ => {
                        w.partition(&[l]);
                        format!("isolate the leader {l}")
                    }
                }
            }
            _ => continue,
        };
        trace.log(&w, what);
        if now >= commands_until && !restored {
            restore_candidacy(&mut w);
            restored = true;
        }
    }
    // Heal: everything back, nobody paused for long, every node a candidate again.
    w.run_until(heal_at);
    restore_candidacy(&mut w);
    w.heal();
    w.net = w.timely_net();
    w.runtime.stall_chance = 0.0;
    w.bring_all_up();
    trace.log(&w, "healed");

    let mut report = SeedReport::new(scenario.clone());
    // Liveness: T of start-up guard for restarted nodes, then 2T + N*S, and a lease's worth for a
    // node whose stalled step was still running.
    let budget = te * 3 + t.stagger * n as u32 + t.lease * 2;
    report.leader_after_heal = run_until_cond(&mut w, budget, sample_step(&t), |w| {
        w.agreed_leader().is_some()
    });
    if report.leader_after_heal.is_none() {
        w.checker.violate(
            w.now().as_nanos() as u64,
            format!(
                "no agreed leader {budget:?} after healing: {}",
                w.describe()
            ),
        );
    }
    // Steady state: after preemption has had its time (flap damping may have raised it), the
    // top-ranked node leads.
    // (Only when every node preempts: a leader with `P = 0` keeps leading by design.)
    if scenario.every_node_preempts() {
        let wait = t.preempt_after.max(te);
        let settle = wait * (16 + 2) + te * 2;
        let top = run_until_cond(&mut w, settle, te / 4, |w| {
            w.agreed_leader().is_some_and(|(i, _)| w.is_top_ranked(i))
        });
        trace.log(&w, "settled");
        if top.is_none() {
            let what = format!(
                "steady-state leader is not the top-ranked node {settle:?} after healing: {}",
                w.describe()
            );
            w.checker.violate(w.now().as_nanos() as u64, what);
        }
    }
    report.violations = w.checker.violations.clone();
    report.events = w.stats.events;
    report.trace = trace.0;
    report
}

/// Makes quorum `q` whole for a calm spell: every node of it up and a candidate, the links among
/// them open both ways without extra loss or delay, the network timely and the loop unstalled.
fn calm_spell(w: &mut World, q: &[usize]) {
    let timely = w.timely_net();
    w.net.loss = 0.0;
    w.net.long_delay_chance = 0.0;
    w.net.max_delay = w.net.max_delay.min(timely.max_delay);
    w.runtime.stall_chance = 0.0;
    for &a in q {
        for &b in q {
            w.unblock(a, b);
            w.net.link_loss.remove(&(a, b));
            w.net.link_delay.remove(&(a, b));
        }
        w.restart(a);
        if !w.config(a).eligible || w.view(a).is_some_and(|v| !v.eligible) {
            let _ = w.command(
                a,
                Input::SetCandidacy {
                    eligible: true,
                    priority: None,
                },
            );
        }
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

/// Leaderless stretches of `group`, sampled: the share of the time without an agreed leader
/// and the longest stretch.
struct Watch {
    step: Duration,
    leaderless: Duration,
    observed: Duration,
    current: Duration,
    longest: Duration,
}

impl Watch {
    fn new(step: Duration) -> Watch {
        Watch {
            step,
            leaderless: Duration::ZERO,
            observed: Duration::ZERO,
            current: Duration::ZERO,
            longest: Duration::ZERO,
        }
    }

    fn sample(&mut self, has_leader: bool) {
        self.observed += self.step;
        if has_leader {
            self.current = Duration::ZERO;
        } else {
            self.leaderless += self.step;
            self.current += self.step;
            self.longest = self.longest.max(self.current);
        }
    }

    fn share(&self) -> f64 {
        self.leaderless.as_secs_f64() / self.observed.as_secs_f64().max(1e-9)
    }
}

/// A leader that answers as leader and is followed by a quorum of the members (itself
/// included), all in its term: the cluster works, whatever a faulty node sees.
fn quorum_leader(w: &World) -> Option<usize> {
    let n = w.size();
    (0..n).find(|&l| {
        if !w.claims_leadership(l) {
            return false;
        }
        let Some(lv) = w.view(l) else {
            return false;
        };
        let followers = (0..n)
            .filter(|&i| w.is_up(i) && !w.is_paused(i))
            .filter_map(|i| w.view(i))
            .filter(|v| v.term == lv.term && v.leader.as_deref() == Some(lv.node_id.as_str()))
            .count();
        followers >= w.config(l).members.quorum()
    })
}

/// The leader that every running node of `group` names, if it answers as leader (it may be
/// outside the group).
fn leader_seen_by(w: &World, group: &[usize]) -> Option<usize> {
    let mut named: Option<(String, u64)> = None;
    for &i in group {
        if !w.is_up(i) || w.is_paused(i) {
            continue;
        }
        let v = w.view(i)?;
        let l = (v.leader.clone()?, v.term);
        match &named {
            None => named = Some(l),
            Some(n) if *n == l => {}
            Some(_) => return None,
        }
    }
    let (leader, _) = named?;
    let idx = (0..w.size()).find(|&i| w.id(i) == leader)?;
    w.claims_leadership(idx).then_some(idx)
}

/// Faults that stay: one node's, a second node's in clusters of five and more, or a minority
/// cut off. The rest, a quorum connected both ways, must elect within a bound and keep a leader.
pub fn run_persistent(scenario: Scenario, fault: Fault, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let (mut w, mut rng) = world_for(&scenario, factory);
    w.runtime = RuntimeModel {
        fsync_max: Duration::from_millis(2),
        ..RuntimeModel::default()
    };
    let n = w.size();
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());
    let mut report = SeedReport::new(scenario.clone());
    let step = sample_step(&t);
    if run_until_cond(&mut w, te * 4 + t.stagger * n as u32, step, |w| {
        w.agreed_leader().is_some()
    })
    .is_none()
    {
        w.checker.violate(
            w.now().as_nanos() as u64,
            "no first leader before the fault",
        );
    }
    // Let preemption settle so that the leader is usually the top-ranked node too.
    w.run_until(w.now() + t.preempt_after.max(te) * 2);
    let leader = w.agreed_leader().map(|(i, _)| i);
    let top = (0..n).find(|&i| w.is_top_ranked(i));
    let target = match scenario.target {
        Target::Leader => leader.or(top),
        Target::TopRanked => top,
        Target::Follower => (0..n).find(|&i| Some(i) != leader),
    }
    .unwrap_or(0);
    // Every faulty node with its fault.
    let mut faulty: Vec<(usize, Fault)> = vec![(target, fault)];
    if fault == Fault::MinorityCut {
        let mut others: Vec<usize> = (0..n).filter(|&i| i != target).collect();
        shuffle(&mut others, &mut rng);
        let minority = (n - 1) / 2;
        faulty.extend(others.iter().take(minority - 1).map(|&i| (i, fault)));
    }
    if let Some(second) = scenario.second {
        let others: Vec<usize> = (0..n).filter(|&i| i != target).collect();
        faulty.push((others[rng.below(others.len() as u64) as usize], second));
    }
    let is_faulty = |i: usize| faulty.iter().any(|&(j, _)| j == i);
    let group: Vec<usize> = (0..n).filter(|&i| !is_faulty(i)).collect();
    let fault_at = w.now();
    if fault == Fault::MinorityCut {
        let side: Vec<usize> = faulty.iter().map(|&(i, _)| i).collect();
        w.partition(&side);
    }
    for &(i, f) in &faulty {
        match f {
            Fault::Deaf | Fault::KernelDeaf { .. } => w.deafen(i),
            Fault::Mute => w.mute(i),
            Fault::OneWayOut => {
                // It hears one member that does not hear it.
                let other = group[rng.below(group.len() as u64) as usize];
                w.block(i, other);
            }
            Fault::LossyLinks(p) => {
                for j in (0..n).filter(|&j| j != i) {
                    w.net.link_loss.insert((i, j), p);
                    w.net.link_loss.insert((j, i), p);
                }
            }
            Fault::MinorityCut | Fault::Flapping { .. } | Fault::FlappingLinks { .. } => {}
        }
    }
    trace.log(
        &w,
        format!(
            "{} on nodes {:?}",
            fault.name(),
            faulty
                .iter()
                .map(|&(i, f)| (i, f.name()))
                .collect::<Vec<_>>()
        ),
    );
    // Bound for the first leader after the fault: the target's lease (if it led), the
    // followers' guard, a round; plus the stagger of every rank. A lossy node may cost a
    // bounded veto (T) and a lost round more (as in the failover check below).
    let lossy = faulty
        .iter()
        .any(|(_, f)| matches!(f, Fault::LossyLinks(_)));
    let extra = if lossy { te * 2 } else { Duration::ZERO };
    let first_bound = t.lease + te * 2 + t.stagger * n as u32 + t.heartbeat * 2 + extra;
    // Then no stretch without a leader longer than a failover.
    let gap_bound = first_bound;
    // Long enough that the one failover the fault itself may cost is a small share, also when
    // the stagger (the service's fixed 250 ms) dwarfs T.
    let observe = (te * 20).max(gap_bound * 10);
    let mut watch = Watch::new(step);
    let mut first: Option<Duration> = None;
    // Per faulty node: when its flapping fault turns next, and whether it is whole now.
    let mut flips: Vec<(Duration, bool)> = faulty.iter().map(|_| (fault_at, true)).collect();
    let mut last_leader = None;
    let mut drained = vec![false; faulty.len()];
    // SIM_VERBOSE: the state every T/4 in the trace, for replays.
    let verbose = std::env::var_os("SIM_VERBOSE").is_some();
    let mut seen_transitions = w.transitions.len();
    while w.now() < fault_at + observe {
        for (k, &(i, f)) in faulty.iter().enumerate() {
            if let Fault::KernelDeaf { drain } = f {
                if !drained[k] && w.now() >= fault_at + t.lease.mul_f64(drain) {
                    // The connections it still sent on have timed out: nothing of it arrives.
                    w.mute(i);
                    drained[k] = true;
                    trace.log(&w, format!("node {i}'s sends stop arriving"));
                }
            }
        }
        for (k, &(i, f)) in faulty.iter().enumerate() {
            let (next_flip, whole) = flips[k];
            let (u, d) = match f {
                Fault::Flapping { up, down } | Fault::FlappingLinks { up, down } => (up, down),
                _ => continue,
            };
            if w.now() < next_flip {
                continue;
            }
            let what = match (f, whole) {
                (Fault::Flapping { .. }, true) => {
                    w.crash(i);
                    "crash"
                }
                (Fault::Flapping { .. }, false) => {
                    w.restart(i);
                    "restart"
                }
                (_, true) => {
                    w.partition(&[i]);
                    "cut the links of"
                }
                (_, false) => {
                    for j in (0..n).filter(|&j| j != i) {
                        w.unblock(i, j);
                        w.unblock(j, i);
                    }
                    "restore the links of"
                }
            };
            let next = w.now() + te.mul_f64(if whole { d } else { u });
            flips[k] = (next, !whole);
            trace.log(&w, format!("{what} node {i}"));
        }
        let next = w.now() + step;
        w.run_until(next);
        if verbose {
            if (w.now() - fault_at).as_nanos() % (te.as_nanos() / 4).max(1) < step.as_nanos() {
                trace.log(&w, "(every T/4)");
            }
            for (at, i, tr) in &w.transitions[seen_transitions..] {
                let what = format!("at {:.3}s node {i}: {tr:?}", *at as f64 / 1e9);
                trace.0.push_str(&format!("           {what}\n"));
            }
            seen_transitions = w.transitions.len();
        }
        let now_leader = quorum_leader(&w);
        if now_leader != last_leader {
            trace.log(&w, format!("leader now {now_leader:?}"));
            last_leader = now_leader;
        }
        let has = now_leader.is_some();
        if first.is_none() {
            if has {
                first = Some(w.now() - fault_at);
            } else if w.now() - fault_at > first_bound {
                let what = format!(
                    "{}: no leader agreed by the connected quorum {first_bound:?} after the fault: {}",
                    fault.name(),
                    w.describe()
                );
                w.checker.violate(w.now().as_nanos() as u64, what);
                break;
            }
            continue;
        }
        watch.sample(has);
        if watch.current > gap_bound {
            let what = format!(
                "{}: the connected quorum was without a leader for {:?}: {}",
                fault.name(),
                watch.current,
                w.describe()
            );
            w.checker.violate(w.now().as_nanos() as u64, what);
            break;
        }
    }
    trace.log(&w, "observed");
    report.leaderless_share = Some(watch.share());
    let flapping = faulty.iter().any(|(_, f)| f.flaps());
    // A flapping node may cost the others one failover per flap window, not one per flap.
    // With mixed timings a failover costs the slowest node's promise (rule 5) while faster
    // nodes rank by their own windows, so there the bound is one failover of the slowest
    // configuration per flap cycle (a node's `up + down`).
    let share_bound = if scenario.node_timings.is_empty() {
        0.15
    } else {
        let cycle = faulty
            .iter()
            .filter_map(|(_, f)| match f {
                Fault::Flapping { up, down } | Fault::FlappingLinks { up, down } => {
                    Some(te.mul_f64(up + down))
                }
                _ => None,
            })
            .min()
            .unwrap_or(te);
        let failover = te + t.stagger * n as u32 + t.heartbeat * 2;
        (failover.as_secs_f64() / cycle.as_secs_f64() + 0.05).max(0.15)
    };
    if flapping && watch.share() > share_bound {
        let what = format!(
            "{}: the connected quorum was without a leader {:.0}% of the time (bound {:.0}%)",
            fault.name(),
            watch.share() * 100.0,
            share_bound * 100.0
        );
        w.checker.violate(w.now().as_nanos() as u64, what);
    }
    report.leader_after_heal = first;
    // A second failure while the faults stay: the leader (not a faulty node) crashes. When the
    // others still form a quorum without the faulty nodes, they elect as fast as without the
    // faults: the faulty nodes must not hold them up (rule 11).
    if let Some(l) = quorum_leader(&w).filter(|&l| !is_faulty(l)) {
        let enough = n - faulty.len() > quorum_of(n);
        if !flapping && enough && w.checker.violations.is_empty() {
            w.crash(l);
            // The followers' guard (T on a clock that may run slow by r), every rank's stagger,
            // a few rounds. A lossy top-ranked node may hold the others up for one bounded
            // veto (T) more.
            // Lost messages cost retries: a lossy node gets a wider bound (still a bound).
            let guards = if lossy { 6 } else { 1 };
            let bound = te.mul_f64(guards as f64 / (1.0 - t.max_drift))
                + t.stagger * n as u32
                + t.heartbeat * 3 * guards;
            let took = run_until_cond(&mut w, bound * 3, step, |w| quorum_leader(w).is_some());
            trace.log(&w, format!("leader {l} crashed; new leader after {took:?}"));
            if took.is_none_or(|d| d > bound) {
                let what = format!(
                    "{}: failover with the fault in place took {took:?}, more than {bound:?}: {}",
                    fault.name(),
                    w.describe()
                );
                w.checker.violate(w.now().as_nanos() as u64, what);
            }
        }
    }
    report.violations = w.checker.violations.clone();
    report.events = w.stats.events;
    report.trace = trace.0;
    report
}

/// Every node restarted in turn; leaderless time per leader restart. With `plan.overlaps`, some
/// restarts of the leader overlap a handover in flight: an operator step-down comes first, a
/// second voter is killed or stopped before the old leader is gone, and the operator names the
/// node that just resigned (still cooling) as the next successor.
pub fn run_rolling(scenario: Scenario, plan: RollingPlan, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let (mut w, mut rng) = world_for(&scenario, factory);
    w.runtime = RuntimeModel {
        fsync_max: Duration::from_millis(3),
        ..RuntimeModel::default()
    };
    let n = w.size();
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());
    let mut report = SeedReport::new(scenario.clone());
    let step = sample_step(&t);
    let all: Vec<usize> = (0..n).collect();
    if run_until_cond(&mut w, te * 4 + t.stagger * n as u32, step, |w| {
        w.agreed_leader().is_some()
    })
    .is_none()
    {
        w.checker.violate(
            w.now().as_nanos() as u64,
            "no first leader before the restarts",
        );
    }
    if let Change::Timings(new) = &plan.change {
        // Timely for the new timings too.
        let tight = NetConfig::timely(new);
        if tight.max_delay < w.net.max_delay {
            w.net = tight;
        }
    }
    let fast = handover_bound(&w);
    w.net.loss = plan.loss;
    // Nodes an overlapping fault took down, and when the orchestrator brings them back.
    let mut pending: Vec<(Duration, usize)> = Vec::new();
    let grace = w.runtime.handover_grace + te;
    for pass in 0..plan.passes {
        // Highest id first (a StatefulSet), lowest first, or shuffled.
        let mut order: Vec<usize> = all.clone();
        match rng.below(3) {
            0 => order.sort_by(|a, b| w.id(*b).cmp(w.id(*a))),
            1 => order.sort_by(|a, b| w.id(*a).cmp(w.id(*b))),
            _ => {
                shuffle(&mut order, &mut rng);
            }
        }
        for i in order {
            let was_leader = w.claims_leadership(i);
            let kill = rng.chance(plan.kill_share);
            let step_down = plan.overlaps && was_leader && !kill && rng.chance(0.3);
            let overlap = plan.overlaps && was_leader && !kill && rng.chance(0.4);
            let stopped_at = w.now();
            if kill {
                w.crash(i);
            } else if step_down {
                let successor = rng
                    .chance(0.6)
                    .then(|| w.id(rng.below(n as u64) as usize).to_string());
                let r = w.command(
                    i,
                    Input::StepDown {
                        successor: successor.clone(),
                        expected_term: None,
                    },
                );
                trace.log(
                    &w,
                    format!(
                        "pass {pass}: operator step-down of {i}, successor {successor:?}: {r:?}"
                    ),
                );
            } else {
                w.stop(i);
            }
            if overlap {
                overlap_fault(&mut w, &mut rng, i, &mut pending, &mut trace);
            }
            if step_down {
                let limit = te * 3 + t.stagger * n as u32;
                roll_until(&mut w, limit, step, &mut pending, |w| {
                    w.current_leader().is_some_and(|l| l != i)
                });
                // Rule 10: a named successor campaigns at once even while it cools down.
                if let Some(l) = w.current_leader().filter(|&l| l != i && rng.chance(0.5)) {
                    let back = Some(w.id(i).to_string());
                    let r = w.command(
                        l,
                        Input::StepDown {
                            successor: back.clone(),
                            expected_term: None,
                        },
                    );
                    trace.log(
                        &w,
                        format!("operator step-down of {l}, successor {back:?} (cooling): {r:?}"),
                    );
                    w.run_until(w.now() + t.heartbeat.mul_f64(rng.unit() * 2.0));
                }
                w.stop(i);
            }
            if !kill {
                roll_until(&mut w, grace, step, &mut pending, |w| !w.is_up(i));
            }
            let named = w
                .last_resign(i)
                .filter(|(at, _)| *at >= stopped_at)
                .map(|(at, s)| format!(", resigned at {:.3}s naming {s:?}", at.as_secs_f64()));
            trace.log(
                &w,
                format!(
                    "pass {pass}: {} {i}{}{}",
                    if kill { "kill" } else { "SIGTERM" },
                    if was_leader { " (leader)" } else { "" },
                    named.unwrap_or_default()
                ),
            );
            let down = te.mul_f64(rng.unit() * 0.3);
            roll_until(&mut w, down, step, &mut pending, |_| false);
            // The change this roll makes, one node at a time: new flags or a new build.
            let forth = pass % 2 == 0;
            match &plan.change {
                Change::Nothing => {}
                Change::Timings(new) => {
                    w.retime(i, if forth { *new } else { scenario.timings });
                }
                Change::Upgrade { downgrade } => {
                    let back = !forth && *downgrade;
                    w.rebuild(
                        i,
                        if back {
                            Build::Previous
                        } else {
                            Build::Current
                        },
                    );
                }
            }
            w.restart(i);
            if plan.readiness {
                // The orchestrator waits for /readyz of the node it restarted, and of any other
                // node a fault took down meanwhile, before it goes on.
                let ready = roll_until(&mut w, te * 3, step, &mut pending, |w| w.ready(i));
                if ready.is_none() {
                    trace.log(&w, format!("node {i} not ready after 3T"));
                }
            } else {
                w.run_until(w.now() + t.heartbeat.mul_f64(rng.unit()));
            }
            if !pending.is_empty() {
                let gate = plan.readiness;
                let back = roll_until(&mut w, grace + te * 3, step, &mut pending, |w| {
                    (0..n).all(|j| w.is_up(j) && (!gate || w.ready(j)))
                });
                if back.is_none() {
                    trace.log(&w, "a node taken down by an overlapping fault is not back");
                }
            }
            if was_leader {
                let limit = te * 4 + t.stagger * n as u32;
                let found = leader_seen_by(&w, &all).is_some()
                    || roll_until(&mut w, limit, step, &mut pending, |w| {
                        leader_seen_by(w, &all).is_some()
                    })
                    .is_some();
                if !found {
                    let what = format!(
                        "no leader {limit:?} after the leader's restart: {}",
                        w.describe()
                    );
                    w.checker.violate(w.now().as_nanos() as u64, what);
                    continue;
                }
                // From the moment the old leader stopped answering as leader to the moment
                // another node did, as the checker saw the claims.
                let gap = w
                    .checker
                    .first_claim_gap_after(stopped_at.as_nanos() as u64)
                    .unwrap_or_default();
                report.leader_restart_gaps.push(gap);
                trace.log(
                    &w,
                    format!(
                        "leaderless for {gap:?} after {:.3}s (the leader's restart)",
                        stopped_at.as_secs_f64()
                    ),
                );
                // A handover needs a quorum without the leader (two nodes wait for it to return).
                let plain = !kill && !step_down && !overlap && plan.loss == 0.0 && n > quorum_of(n);
                if plain && gap > fast {
                    let what = format!(
                        "the graceful restart of the leader {i} left the cluster without a leader \
                         for {gap:?}, more than {fast:?} (rule 10: a handover waits for no timer)"
                    );
                    w.checker.violate(w.now().as_nanos() as u64, what);
                }
            }
        }
    }
    w.net = w.timely_net();
    let budget = te * 3 + t.stagger * n as u32;
    report.leader_after_heal =
        run_until_cond(&mut w, budget, step, |w| w.agreed_leader().is_some());
    if report.leader_after_heal.is_none() {
        let what = format!(
            "no agreed leader {budget:?} after the rolling restart: {}",
            w.describe()
        );
        w.checker.violate(w.now().as_nanos() as u64, what);
    }
    report.violations = w.checker.violations.clone();
    report.events = w.stats.events;
    report.trace = trace.0;
    report
}

/// The longest a graceful handover may leave the cluster without a leader on a timely network
/// without loss: the resign, a pre-vote round and a vote round (five one-way delays) and the
/// fsyncs of the votes and the new term, with a delay's worth to spare. Rule 10 makes the
/// successor campaign at once, so no timer (`h`, the stagger, `T`) belongs in it.
fn handover_bound(w: &World) -> Duration {
    w.net.max_delay * 6 + w.runtime.fsync_max * 4
}

/// Takes a second node down while a handover is in flight (right after the leader's resign left,
/// before the old leader has exited): the successor it named or another voter, by `kill -9` or
/// SIGTERM; the orchestrator brings it back a little later.
fn overlap_fault(
    w: &mut World,
    rng: &mut Rng,
    leader: usize,
    pending: &mut Vec<(Duration, usize)>,
    trace: &mut Trace,
) {
    let n = w.size();
    let te = w.timings().election_timeout;
    w.run_until(w.now() + w.net.max_delay.mul_f64(rng.unit() * 3.0));
    let named = w
        .last_resign(leader)
        .and_then(|(_, s)| s.map(str::to_string))
        .and_then(|id| (0..n).find(|&j| w.id(j) == id));
    let others: Vec<usize> = (0..n).filter(|&j| j != leader && w.is_up(j)).collect();
    let victim = match named {
        Some(j) if j != leader && rng.chance(0.6) => j,
        _ if others.is_empty() => return,
        _ => others[rng.below(others.len() as u64) as usize],
    };
    let how = if rng.chance(0.5) {
        w.crash(victim);
        "kill"
    } else {
        w.stop(victim);
        "SIGTERM"
    };
    let back = w.now() + te.mul_f64(0.05 + rng.unit() * 0.25);
    pending.push((back, victim));
    trace.log(
        w,
        format!(
            "{how} {victim} during the handover of {leader} (named {named:?}), back from {:.3}s",
            back.as_secs_f64()
        ),
    );
}

/// Puts `v` in a random order drawn from `rng` (Fisher-Yates, from the back).
fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for k in (1..v.len()).rev() {
        v.swap(k, rng.below(k as u64 + 1) as usize);
    }
}

/// Runs in steps until `cond` holds or `limit` passes, restarting the nodes of `pending` once
/// their time has come and they are down; how long it took.
fn roll_until(
    w: &mut World,
    limit: Duration,
    step: Duration,
    pending: &mut Vec<(Duration, usize)>,
    mut cond: impl FnMut(&World) -> bool,
) -> Option<Duration> {
    let start = w.now();
    while w.now() < start + limit {
        let next = (w.now() + step).min(start + limit);
        w.run_until(next);
        pending.retain(|&(at, j)| {
            if w.now() >= at && !w.is_up(j) {
                w.restart(j);
                false
            } else {
                true
            }
        });
        if cond(w) {
            return Some(w.now() - start);
        }
    }
    None
}

/// Membership changes one member at a time (and stray nodes) under partitions, loss and crashes.
pub fn run_membership(scenario: Scenario, plan: MemberPlan, factory: Factory) -> SeedReport {
    let t = scenario.envelope();
    let te = t.election_timeout;
    let mut rng = Rng::new(scenario.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xC0FFEE);
    // Every node that will ever exist: the initial members first, then the ones added later.
    let extra = match plan {
        MemberPlan::Grow | MemberPlan::TwoAtOnce => 2,
        MemberPlan::Replace | MemberPlan::Stray => 1,
        MemberPlan::Shrink => 0,
    };
    let ids = node_ids(scenario.size + extra, &mut rng);
    let initial: Vec<String> = ids[..scenario.size]
        .iter()
        .map(|(i, _)| i.clone())
        .collect();
    let specs: Vec<NodeSpec> = ids
        .iter()
        .enumerate()
        .map(|(k, (id, p))| NodeSpec {
            members: Some(initial.clone()),
            starts: k < scenario.size,
            timings: scenario.node_timings.get(k).copied(),
            ..NodeSpec::new(id.clone(), *p)
        })
        .collect();
    let mut w = world_of(&scenario, specs, factory, &mut rng);
    w.runtime = RuntimeModel {
        fsync_max: Duration::from_millis(3),
        ..RuntimeModel::default()
    };
    let mut trace = Trace(String::new());
    trace.log(&w, scenario.summary());
    let mut report = SeedReport::new(scenario.clone());
    let step = sample_step(&t);
    w.run_until(te * 4 + t.stagger * scenario.size as u32);
    let index = |w: &World, id: &str| (0..w.size()).find(|&i| w.id(i) == id).expect("known id");

    // The sequence of member sets, each one member away from the previous.
    let mut sets: Vec<Vec<String>> = vec![initial.clone()];
    match plan {
        MemberPlan::Grow => {
            for (id, _) in &ids[scenario.size..] {
                let mut next = sets.last().unwrap().clone();
                next.push(id.clone());
                sets.push(next);
            }
        }
        MemberPlan::Shrink => {
            for _ in 0..2 {
                let mut next = sets.last().unwrap().clone();
                let k = rng.below(next.len() as u64) as usize;
                next.remove(k);
                sets.push(next);
            }
        }
        MemberPlan::Replace => {
            let mut next = initial.clone();
            next.push(ids[scenario.size].0.clone());
            sets.push(next.clone());
            let k = rng.below(initial.len() as u64) as usize;
            next.retain(|id| *id != initial[k]);
            sets.push(next);
        }
        MemberPlan::Stray | MemberPlan::TwoAtOnce => {}
    }
    // Some disorder between the operator's steps.
    let noise = |w: &mut World, rng: &mut Rng, trace: &mut Trace| {
        let n = w.size();
        match rng.below(6) {
            0 => {
                let side: Vec<usize> = (0..n).filter(|_| rng.chance(0.5)).collect();
                w.partition(&side);
                trace.log(w, format!("partition {side:?}"));
            }
            1 => {
                w.heal();
                trace.log(w, "heal links");
            }
            2 => {
                w.net.loss = rng.unit() * 0.1;
                trace.log(w, format!("loss {:.0}%", w.net.loss * 100.0));
            }
            3 => {
                let i = rng.below(n as u64) as usize;
                if w.is_up(i) {
                    w.crash(i);
                    let back = w.now() + te.mul_f64(0.2 + rng.unit());
                    w.run_until(back);
                    w.restart(i);
                    trace.log(w, format!("crash and restart {i}"));
                }
            }
            _ => {}
        }
    };
    if plan == MemberPlan::TwoAtOnce {
        // Some members restarted with two new members added, and the new ones started: the
        // sets differ by two ids, so quorums of the two need not intersect. Every node hears
        // every other (rule 1 relies on it), crashes happen; no leader is acceptable.
        let mut bigger = initial.clone();
        bigger.extend(ids[scenario.size..].iter().map(|(id, _)| id.clone()));
        let switched = 1 + rng.below((scenario.size / 2) as u64) as usize;
        for id in initial.iter().take(switched) {
            let i = index(&w, id);
            w.reconfigure(i, &bigger);
            w.crash(i);
            w.restart(i);
        }
        for (id, _) in &ids[scenario.size..] {
            let i = index(&w, id);
            w.reconfigure(i, &bigger);
            w.restart(i);
        }
        trace.log(
            &w,
            format!("{switched} members and 2 new nodes run with {bigger:?}"),
        );
        let until = w.now() + te * 15;
        while w.now() < until {
            let next = w.now() + te.mul_f64(0.3 + rng.unit());
            w.run_until(next);
            let i = rng.below(w.size() as u64) as usize;
            if rng.chance(0.3) && w.is_up(i) {
                w.crash(i);
                w.run_until(w.now() + te.mul_f64(rng.unit()));
                w.restart(i);
                trace.log(&w, format!("crash and restart {i}"));
            }
        }
        report.violations = w.checker.violations.clone();
        report.events = w.stats.events;
        report.trace = trace.0;
        return report;
    }
    if plan == MemberPlan::Stray {
        // A replacement started before the old node was removed (its set swaps one member),
        // or a scale-up whose new node lists one more member than the others.
        let stray = index(&w, &ids[scenario.size].0);
        let mut set = initial.clone();
        if rng.chance(0.5) {
            let k = rng.below(set.len() as u64) as usize;
            set.remove(k);
        }
        set.push(ids[scenario.size].0.clone());
        w.reconfigure(stray, &set);
        w.restart(stray);
        trace.log(&w, format!("stray {stray} with members {set:?}"));
        let until = w.now() + te * 12;
        while w.now() < until {
            let next = w.now() + te.mul_f64(0.3 + rng.unit());
            w.run_until(next);
            noise(&mut w, &mut rng, &mut trace);
        }
        w.heal();
        w.net = w.timely_net();
    } else {
        for (k, pair) in sets.windows(2).enumerate() {
            let (old, new) = (&pair[0], &pair[1]);
            if k > 0 {
                // The operator procedure rule 1 relies on: the next change only once every
                // member runs the current set and is ready on it, which needs the partition
                // healed. Going on across it let a member that never heard a term's leader
                // (on the set two ids back) help elect a second leader in that term (seed
                // 7959 with the wider timings).
                w.heal();
                let current: Vec<usize> = old.iter().map(|id| index(&w, id)).collect();
                let budget = te * 6 + t.stagger * current.len() as u32;
                let settled = run_until_cond(&mut w, budget, step, |w| {
                    current.iter().all(|&i| w.ready(i))
                });
                trace.log(&w, format!("every member of {old:?} ready: {settled:?}"));
                if settled.is_none() {
                    let what = format!(
                        "the members of {old:?} were not all ready {budget:?} after healing: {}",
                        w.describe()
                    );
                    w.checker.violate(w.now().as_nanos() as u64, what);
                }
            }
            trace.log(&w, format!("change members {old:?} -> {new:?}"));
            // New member first, with the new set.
            for id in new.iter().filter(|id| !old.contains(id)) {
                let i = index(&w, id);
                w.reconfigure(i, new);
                w.restart(i);
                trace.log(&w, format!("start {i} with the new set"));
            }
            // Every staying member restarted with the new set, one at a time.
            let mut staying: Vec<&String> = new.iter().filter(|id| old.contains(id)).collect();
            shuffle(&mut staying, &mut rng);
            for id in staying {
                let i = index(&w, id);
                w.reconfigure(i, new);
                if rng.chance(0.8) {
                    w.stop(i);
                    let grace = w.runtime.handover_grace + te;
                    run_until_cond(&mut w, grace, step, |w| !w.is_up(i));
                } else {
                    w.crash(i);
                }
                w.run_until(w.now() + te.mul_f64(rng.unit() * 0.3));
                w.restart(i);
                trace.log(&w, format!("restart {i} with the new set"));
                if rng.chance(0.3) {
                    noise(&mut w, &mut rng, &mut trace);
                }
                run_until_cond(&mut w, te * 3, step, |w| {
                    w.view(i).is_some_and(|v| v.can_vote)
                });
            }
            // A removed member stops for good.
            for id in old.iter().filter(|id| !new.contains(id)) {
                let i = index(&w, id);
                w.stop(i);
                let grace = w.runtime.handover_grace + te;
                run_until_cond(&mut w, grace, step, |w| !w.is_up(i));
                w.crash(i);
                trace.log(&w, format!("remove {i}"));
            }
            if rng.chance(0.5) {
                noise(&mut w, &mut rng, &mut trace);
            }
            w.run_until(w.now() + te.mul_f64(rng.unit() * 2.0));
        }
        w.heal();
        w.net = w.timely_net();
    }
    // Liveness among the final members, all of them up.
    let last = sets.last().unwrap().clone();
    let members: Vec<usize> = last.iter().map(|id| index(&w, id)).collect();
    for &i in &members {
        w.restart(i);
    }
    trace.log(&w, "healed");
    let budget = te * 4 + t.stagger * members.len() as u32 + t.lease;
    report.leader_after_heal = run_until_cond(&mut w, budget, step, |w| {
        w.agreed_leader_among(&members).is_some()
    });
    if report.leader_after_heal.is_none() && quorum_of(members.len()) <= members.len() {
        let what = format!(
            "no leader among the final members {budget:?} after the change: {}",
            w.describe()
        );
        w.checker.violate(w.now().as_nanos() as u64, what);
    }
    report.violations = w.checker.violations.clone();
    report.events = w.stats.events;
    report.trace = trace.0;
    report
}

/// Under 2 % loss and no other fault, once a leader is agreed it must never change.
pub fn quiet_violations(scenario: &Scenario, factory: Factory) -> Vec<Violation> {
    let t = scenario.envelope();
    let (mut w, _) = world_for(scenario, factory);
    w.net.loss = 0.02;
    let start = t.election_timeout * 4 + t.stagger * scenario.size as u32;
    w.run_until(start);
    // Preemption may still move leadership once, to the top-ranked node.
    w.run_until(start + t.preempt_after.max(t.election_timeout) * 2);
    let Some((leader, term)) = w.agreed_leader() else {
        return vec![Violation {
            at: w.now(),
            what: format!("quiet run: no leader after {start:?}: {}", w.describe()),
        }];
    };
    let seen = w.transitions.len();
    // Twenty of the leader's own election timeouts (the same share of its heartbeats whatever
    // the other nodes run).
    w.run_until(w.now() + w.timings_of(leader).election_timeout * 20);
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

/// A scenario of `size` nodes at `timings` without faults, for the measurements below.
fn plain(seed: u64, size: usize, timings: Timings) -> Scenario {
    Scenario {
        seed,
        family: Family::Chaos,
        size,
        timings,
        faults_until: Duration::ZERO,
        quiet: false,
        target: Target::Leader,
        second: None,
        node_timings: Vec::new(),
    }
}

/// Simulated failover: true time from the crash of a stable leader until every survivor agrees on
/// a new leader that holds its lease. `None` if none within a minute.
pub fn failover_time(seed: u64, size: usize, timings: Timings) -> Option<Duration> {
    let (mut w, mut rng) = world_for(&plain(seed, size, timings), core_factory());
    let settle = timings.election_timeout * 4 + Duration::from_millis(rng.below(1000));
    w.run_until(settle);
    let (leader, _) = w.agreed_leader()?;
    w.crash(leader);
    run_until_cond(
        &mut w,
        Duration::from_secs(60),
        Duration::from_millis(5),
        |w| w.agreed_leader().is_some(),
    )
}

/// Publishes per heartbeat interval in a steady cluster of `size`, and deliveries (each publish
/// reaches every other node).
pub fn traffic_per_interval(size: usize, timings: Timings) -> (f64, f64) {
    let (mut w, _) = world_for(&plain(size as u64, size, timings), core_factory());
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

/// The persistent-fault family at default timings for figures: leaderless share per fault.
pub fn persistent_figure(seed: u64, size: usize, fault: Fault, target: Target) -> SeedReport {
    let scenario = Scenario {
        family: Family::Persistent(fault),
        target,
        ..plain(seed, size, Timings::default())
    };
    run_persistent(scenario, fault, core_factory())
}

/// The rolling family at default timings for figures: leaderless time per leader restart.
pub fn rolling_figure(seed: u64, size: usize, plan: RollingPlan) -> SeedReport {
    let scenario = Scenario {
        family: Family::Rolling(plan.clone()),
        ..plain(seed, size, Timings::default())
    };
    run_rolling(scenario, plan, core_factory())
}
