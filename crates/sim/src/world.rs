//! The simulated world: nodes run by a model of the runtime, a lossy broadcast network with
//! per-link faults, drifting clocks whose rates change, crashes between single actions, pauses
//! and stalls, graceful stops and membership changes.
//!
//! The runtime model follows `pilot_election::runtime` step by step: one input at a time; after the
//! core's `handle`, the view everything answering for the node reads (the API snapshot) is
//! updated, then the step's actions run one after the other, each taking some time (a `Persist`
//! is an fsync); inputs that arrive meanwhile wait. A crash can therefore fall between any two
//! actions, and a stall can hold the loop between a `resign` and the next step while the API
//! keeps answering from the snapshot.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

mod firings;
mod observer;
pub use firings::FiringRule;
pub use observer::ObserverRule;

use super::checker::Checker;
use super::previous::Filtered;
use pilot_election_core::{
    Action, Body, Candidacy, CommandError, Config, Input, Member, MemberSet, Message, Node,
    Outcome, Persistent, Readiness, Rng, Role, Timings, Transition, Versions, View,
};

/// What the simulator needs from an election implementation.
pub trait Protocol {
    fn handle(&mut self, now: Instant, input: Input) -> Result<Outcome, CommandError>;
    fn poll_action(&mut self) -> Option<Action>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn view(&self, now: Instant) -> View;
    /// Whether a stopping leader has someone to hand over to (else it exits at once).
    fn has_successor(&self, _now: Instant) -> bool {
        false
    }
    /// The other members as this node knows them (for readiness and debugging).
    fn peers(&self, _now: Instant) -> Vec<Member> {
        Vec::new()
    }
    /// A copy of it in its present state, to run beside it (`None` when it cannot be copied).
    fn twin(&self) -> Option<Box<dyn Protocol>> {
        None
    }
    /// Its whole state as text, to compare two copies.
    fn digest(&self) -> String {
        String::new()
    }
    /// Rule 18's figures (see `Node::beat_check`); `None` for a protocol without them.
    fn beat_check(&self) -> Option<(Instant, Instant, Duration)> {
        None
    }
}

impl Protocol for Node {
    fn handle(&mut self, now: Instant, input: Input) -> Result<Outcome, CommandError> {
        Node::handle(self, now, input)
    }
    fn poll_action(&mut self) -> Option<Action> {
        Node::poll_action(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Node::poll_timeout(self)
    }
    fn view(&self, now: Instant) -> View {
        Node::view(self, now)
    }
    fn has_successor(&self, now: Instant) -> bool {
        Node::has_successor(self, now)
    }
    fn peers(&self, now: Instant) -> Vec<Member> {
        Node::peers(self, now)
    }
    fn twin(&self) -> Option<Box<dyn Protocol>> {
        Some(Box::new(self.clone()))
    }
    fn digest(&self) -> String {
        format!("{self:?}")
    }
    fn beat_check(&self) -> Option<(Instant, Instant, Duration)> {
        Node::beat_check(self)
    }
}

/// Builds a node: configuration, persisted state, local start time, seed, first sequence number.
pub type Factory = Box<dyn Fn(Config, Persistent, Instant, u64, u64) -> Box<dyn Protocol>>;

/// The factory for the real core.
pub fn core_factory() -> Factory {
    Box::new(|c, p, now, seed, seq| Box::new(Node::new(c, p, now, seed, seq)))
}

/// Which build a node runs: this one, or the one before it (protocol version 2 only, emulated
/// by [`Previous`]), for rolling upgrades (docs/protocol.md, rule 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    Current,
    Previous,
}

impl Build {
    /// The protocol versions it reads and writes.
    pub fn speaks(self) -> Versions {
        match self {
            Build::Current => Versions::OURS,
            Build::Previous => Versions::only(Versions::OURS.oldest),
        }
    }
}

/// One node of the world as configured.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub id: String,
    pub priority: u32,
    pub eligible: bool,
    /// Its member set; `None`: every node of the world.
    pub members: Option<Vec<String>>,
    /// Started with the world; a node that is not starts on its first [`World::restart`].
    pub starts: bool,
    /// Its own timings; `None`: the world's.
    pub timings: Option<Timings>,
    pub build: Build,
}

impl NodeSpec {
    pub fn new(id: impl Into<String>, priority: u32) -> NodeSpec {
        NodeSpec {
            id: id.into(),
            priority,
            eligible: true,
            members: None,
            starts: true,
            timings: None,
            build: Build::Current,
        }
    }
}

/// The cluster to simulate.
pub struct WorldConfig {
    pub seed: u64,
    pub group: String,
    /// Every node's timings unless its [`NodeSpec`] has its own.
    pub timings: Timings,
    pub nodes: Vec<NodeSpec>,
    /// Clock rate per node; 1.0 is true time.
    pub rates: Vec<f64>,
    /// Whether the nodes heartbeat on a beat (rule 18), as the service's nodes do: each node's
    /// epoch is drawn from the seed, within a second of the world's start (before or after).
    pub beat: bool,
}

/// A node's clock: piecewise linear in true time, so its rate can change mid-run.
#[derive(Debug, Clone, Copy)]
struct Clock {
    /// True time (ns) and local reading (ns since the world's base) where the current rate began.
    true0: u64,
    local0: u64,
    rate: f64,
}

impl Clock {
    fn local(&self, t: u64) -> u64 {
        self.local0 + ((t.saturating_sub(self.true0)) as f64 * self.rate) as u64
    }
}

/// How the modelled runtime spends time on actions.
#[derive(Debug, Clone)]
pub struct RuntimeModel {
    /// A `Persist` (write and fsync) takes up to this long.
    pub fsync_max: Duration,
    /// Chance that an action stalls the loop (a blocked thread, CPU starvation).
    pub stall_chance: f64,
    /// A stall lasts up to this long.
    pub stall_max: Duration,
    /// The broken order of an old runtime: the API snapshot is updated only after the step's
    /// actions ran. Kept to show that the checker catches it (rule 9).
    pub snapshot_after_actions: bool,
    /// How long a stopping leader waits for its successor (the runtime's handover grace).
    pub handover_grace: Duration,
}

impl Default for RuntimeModel {
    fn default() -> Self {
        RuntimeModel {
            fsync_max: Duration::ZERO,
            stall_chance: 0.0,
            stall_max: Duration::ZERO,
            snapshot_after_actions: false,
            handover_grace: pilot_election_core::stop::HANDOVER_GRACE,
        }
    }
}

/// A graceful stop in progress (SIGTERM): the node exits once its successor leads, at once when
/// it did not lead or has nobody to hand over to, or after the grace.
#[derive(Debug, Clone, Copy)]
struct Stopping {
    since: u64,
    hand_over: bool,
}

/// One node's place in the world; survives crashes (the persisted state lives here).
struct Slot {
    /// Its configuration, timings included, as of its next start.
    config: Config,
    /// The build it runs, as of its next start.
    build: Build,
    /// The build its running process was started with.
    running_build: Build,
    node: Option<Box<dyn Protocol>>,
    persisted: Persistent,
    incarnation: u64,
    clock: Clock,
    paused_until: Option<u64>,
    /// Inputs waiting for the loop (it is busy or paused).
    inbox: VecDeque<Input>,
    /// Actions of the current step still to run.
    running: VecDeque<Action>,
    wake_at: Option<u64>,
    /// The core's view after its last step.
    view: Option<View>,
    /// What the API answers from.
    api: Option<View>,
    stopping: Option<Stopping>,
    /// Crash once this many more actions have run (a directed fault).
    crash_after: Option<u32>,
    /// An action came due while the process was frozen: run it on resume.
    exec_missed: bool,
    /// Wake-ups in a row that the node asked for in the past (a busy loop if it never ends).
    overdue: u32,
    /// When (true ns) its loop was last held by a stall, and until when.
    stalled_until: u64,
    /// Its latest resign: when it left (true ns) and the successor it named.
    last_resign: Option<(u64, Option<String>)>,
    /// The operator's maintenance as its shell keeps it (on disk: it survives restarts).
    maintenance: bool,
    /// Maintenance as its running core was last told.
    core_maintenance: bool,
    /// When (true ns) its core last took a resign that named it the successor.
    named_at: Option<u64>,
    /// Its application's health as the shell's check sees it (rule 17); a restarted shell
    /// finds it at its first check, before the loop's first step.
    healthy: bool,
    /// Health as its running core was last told.
    core_healthy: bool,
    /// Its shell's scheduled firings (rule 19; the record survives restarts).
    firings: firings::Shell,
    /// The term of the last `Release` its core asked for in this run.
    released: Option<u64>,
}

#[derive(Debug)]
enum Kind {
    Deliver {
        to: usize,
        msg: Box<Message>,
    },
    Wake {
        node: usize,
    },
    Resume {
        node: usize,
    },
    Exec {
        node: usize,
        incarnation: u64,
    },
    /// A message reaches the observer, if one watches.
    Observe {
        msg: Box<Message>,
    },
}

/// Something that happens at a true time; `seq` orders events of one instant as they were
/// scheduled.
#[derive(Debug)]
pub(crate) struct Event<K> {
    pub(crate) at: u64,
    pub(crate) seq: u64,
    pub(crate) kind: K,
}

impl<K> PartialEq for Event<K> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<K> Eq for Event<K> {}
impl<K> PartialOrd for Event<K> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<K> Ord for Event<K> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Network behaviour, changeable at any time.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub loss: f64,
    /// Extra loss on single directed links.
    pub link_loss: BTreeMap<(usize, usize), f64>,
    /// Extra delay on single directed links (a slow path, a congested queue).
    pub link_delay: BTreeMap<(usize, usize), Duration>,
    pub duplicate: f64,
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// Chance that a message is held back much longer (beyond the lease), up to `long_delay`.
    pub long_delay_chance: f64,
    pub long_delay: Duration,
}

impl NetConfig {
    /// The default network, its delays capped so that a vote round and an ack round fit in one
    /// lease on the slowest allowed clock: the timeliness the protocol's liveness assumes
    /// (docs/protocol.md, "What it promises"). Faults are drawn on top of it; healing and
    /// persistent-fault runs return to it.
    pub fn timely(t: &Timings) -> NetConfig {
        let cap = t.lease.mul_f64((1.0 - t.max_drift) / 5.0);
        let d = NetConfig::default();
        NetConfig {
            max_delay: d.max_delay.min(cap).max(d.min_delay * 2),
            ..d
        }
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            loss: 0.0,
            link_loss: BTreeMap::new(),
            link_delay: BTreeMap::new(),
            duplicate: 0.0,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(20),
            long_delay_chance: 0.0,
            long_delay: Duration::ZERO,
        }
    }
}

/// Counters a scenario reads after a run.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub published: u64,
    pub delivered: u64,
    pub events: u64,
    /// Messages after which the observer named a leader, each checked.
    pub observed: u64,
}

/// A whole simulated cluster.
pub struct World {
    factory: Factory,
    group: String,
    timings: Timings,
    base: Instant,
    now: u64,
    seq: u64,
    rng: Rng,
    slots: Vec<Slot>,
    queue: BinaryHeap<Reverse<Event<Kind>>>,
    blocked: BTreeSet<(usize, usize)>,
    /// `heard[to][from]`: the incarnation of `from` whose message `to` last took, if any (for
    /// the version check at every send).
    heard: Vec<Vec<Option<u64>>>,
    pub net: NetConfig,
    pub runtime: RuntimeModel,
    pub checker: Checker,
    pub stats: Stats,
    /// Every transition any node reported: (true time ns, node index, transition).
    pub transitions: Vec<(u64, usize, Transition)>,
    /// `SIM_EVENTS=FROM-TO` (seconds of true time): every event in that window goes to stderr,
    /// for a replay.
    watch_window: Option<(u64, u64)>,
    /// Senders outside the member set that send whatever they like (observers, `run
    /// --observe`, gone wrong): every message of theirs is checked to change nothing.
    observers: BTreeSet<String>,
    /// A firing every this many ns of true time (rule 19), if any.
    firing_period: Option<u64>,
    firing_rule: FiringRule,
    /// Every firing that ran: (node, term).
    firing_runs: BTreeMap<u64, (usize, u64)>,
    /// An observer that hears every member's messages, if one was asked for.
    watcher: Option<observer::Watcher>,
}

const MAX_EVENTS_PER_INSTANT: u32 = 10_000;

/// The slowest of `all`, field by field (the longest `h`, `L`, `T`, `S`, `P` and `r`).
pub fn slowest<'a>(all: impl IntoIterator<Item = &'a Timings>) -> Timings {
    let mut all = all.into_iter();
    let mut t = *all.next().expect("at least one set of timings");
    for o in all {
        t.heartbeat = t.heartbeat.max(o.heartbeat);
        t.lease = t.lease.max(o.lease);
        t.election_timeout = t.election_timeout.max(o.election_timeout);
        t.stagger = t.stagger.max(o.stagger);
        t.preempt_after = t.preempt_after.max(o.preempt_after);
        t.max_drift = t.max_drift.max(o.max_drift);
    }
    t
}

/// Node `i`'s beat epoch after the world's base: under a second, from the seed (splitmix64), so
/// that the nodes' beats differ and drawing them leaves the scenario's own draws alone.
pub(crate) fn beat_offset(seed: u64, i: usize) -> Duration {
    let mut z = seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    Duration::from_nanos(z % 1_000_000_000)
}

fn member_set(id: &str, members: &[String]) -> MemberSet {
    MemberSet::new(id, members.iter().cloned()).expect("simulated member sets are valid")
}

impl World {
    pub fn new(config: WorldConfig, factory: Factory) -> World {
        // Any instant will do: every local time is an offset from it.
        #[allow(clippy::disallowed_methods)]
        let base = Instant::now();
        let n = config.nodes.len();
        let everyone: Vec<String> = config.nodes.iter().map(|s| s.id.clone()).collect();
        let slots = config
            .nodes
            .iter()
            .enumerate()
            .map(|(i, spec)| Slot {
                config: Config {
                    node_id: spec.id.clone(),
                    group: config.group.clone(),
                    members: member_set(&spec.id, spec.members.as_ref().unwrap_or(&everyone)),
                    priority: spec.priority,
                    eligible: spec.eligible,
                    healthy: true,
                    timings: spec.timings.unwrap_or(config.timings),
                    beat: config.beat.then(|| base + beat_offset(config.seed, i)),
                },
                build: spec.build,
                running_build: spec.build,
                node: None,
                persisted: Persistent::default(),
                incarnation: 0,
                clock: Clock {
                    true0: 0,
                    local0: 0,
                    rate: config.rates.get(i).copied().unwrap_or(1.0),
                },
                paused_until: None,
                inbox: VecDeque::new(),
                running: VecDeque::new(),
                wake_at: None,
                view: None,
                api: None,
                stopping: None,
                crash_after: None,
                exec_missed: false,
                overdue: 0,
                stalled_until: 0,
                last_resign: None,
                maintenance: false,
                core_maintenance: false,
                named_at: None,
                healthy: true,
                core_healthy: true,
                firings: Default::default(),
                released: None,
            })
            .collect();
        let mut w = World {
            factory,
            group: config.group,
            timings: config.timings,
            base,
            now: 0,
            seq: 0,
            rng: Rng::new(config.seed ^ 0x005E_ED0F_0B5E_55ED),
            slots,
            queue: BinaryHeap::new(),
            blocked: BTreeSet::new(),
            heard: vec![vec![None; n]; n],
            net: NetConfig::default(),
            runtime: RuntimeModel::default(),
            checker: Checker::new(n),
            stats: Stats::default(),
            transitions: Vec::new(),
            observers: BTreeSet::new(),
            firing_period: None,
            firing_rule: FiringRule::Quorum,
            firing_runs: BTreeMap::new(),
            watcher: None,
            watch_window: std::env::var("SIM_EVENTS").ok().and_then(|w| {
                let (a, b) = w.split_once('-')?;
                let s = |x: &str| x.parse::<f64>().ok().map(|v| (v * 1e9) as u64);
                Some((s(a)?, s(b)?))
            }),
        };
        w.net = w.timely_net();
        w.timings = w.envelope();
        for (i, spec) in config.nodes.iter().enumerate() {
            if spec.starts {
                w.start(i);
            }
        }
        w
    }

    /// The slowest of every node's timings, field by field (the longest `h`, `L`, `T`, `S`,
    /// `P` and `r`): what a scenario's time bounds are made of when nodes differ.
    pub fn envelope(&self) -> Timings {
        slowest(self.slots.iter().map(|s| &s.config.timings))
    }

    /// The timely network for every node's timings: one-way delays that let a vote round and an
    /// ack round fit in the shortest lease on the slowest clock (docs/protocol.md, "What it
    /// promises").
    pub fn timely_net(&self) -> NetConfig {
        let shortest = self
            .slots
            .iter()
            .map(|s| s.config.timings)
            .min_by(|a, b| {
                let cap = |t: &Timings| t.lease.mul_f64(1.0 - t.max_drift);
                cap(a).cmp(&cap(b))
            })
            .expect("a world has nodes");
        NetConfig::timely(&shortest)
    }

    /// Node `i`'s timings (as of its next start, if they were just changed).
    pub fn timings_of(&self, i: usize) -> &Timings {
        &self.slots[i].config.timings
    }

    /// Gives node `i` other timings, taking effect at its next start (a rolling timing change
    /// restarts each node with its new flags); the world's bounds follow.
    pub fn retime(&mut self, i: usize, t: Timings) {
        self.slots[i].config.timings = t;
        self.timings = self.envelope();
    }

    /// Makes node `i` run `build` from its next start (a rolling upgrade, or a downgrade).
    pub fn rebuild(&mut self, i: usize, build: Build) {
        self.slots[i].build = build;
    }

    /// The build node `i`'s running process has (or, when it is down, will have).
    pub fn build(&self, i: usize) -> Build {
        if self.is_up(i) {
            self.slots[i].running_build
        } else {
            self.slots[i].build
        }
    }

    pub fn size(&self) -> usize {
        self.slots.len()
    }

    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// True time since the start.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now)
    }

    pub fn id(&self, i: usize) -> &str {
        &self.slots[i].config.node_id
    }

    pub fn config(&self, i: usize) -> &Config {
        &self.slots[i].config
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.slots[i].node.is_some()
    }

    pub fn is_paused(&self, i: usize) -> bool {
        self.slots[i].paused_until.is_some()
    }

    pub fn is_stopping(&self, i: usize) -> bool {
        self.slots[i].stopping.is_some()
    }

    pub fn persisted(&self, i: usize) -> &Persistent {
        &self.slots[i].persisted
    }

    /// Until when (true time) node `i`'s loop was last held by a stall.
    pub fn stalled_until(&self, i: usize) -> Duration {
        Duration::from_nanos(self.slots[i].stalled_until)
    }

    /// When (true time) node `i`'s loop next wakes by itself (its next timer), if one is set.
    pub fn next_wake(&self, i: usize) -> Option<Duration> {
        self.slots[i].wake_at.map(Duration::from_nanos)
    }

    /// How many times node `i` has been started.
    pub fn incarnation(&self, i: usize) -> u64 {
        self.slots[i].incarnation
    }

    /// Whether node `i` will crash after some more actions (a directed fault still pending).
    pub fn crash_armed(&self, i: usize) -> bool {
        self.slots[i].crash_after.is_some()
    }

    /// Node `i`'s latest resign: when it left (true time) and the successor it named.
    pub fn last_resign(&self, i: usize) -> Option<(Duration, Option<&str>)> {
        self.slots[i]
            .last_resign
            .as_ref()
            .map(|(at, s)| (Duration::from_nanos(*at), s.as_deref()))
    }

    /// The node's own clock at true time `t` (ns).
    fn local(&self, i: usize, t: u64) -> Instant {
        self.base + Duration::from_nanos(self.slots[i].clock.local(t))
    }

    /// The first true time at which node `i`'s clock reads at least `at`.
    fn true_time(&self, i: usize, at: Instant) -> u64 {
        let c = self.slots[i].clock;
        let local = at.saturating_duration_since(self.base).as_nanos() as u64;
        let mut t = if local <= c.local0 {
            c.true0
        } else {
            c.true0 + ((local - c.local0) as f64 / c.rate).ceil() as u64
        };
        while c.local(t) < local {
            t += 1;
        }
        t
    }

    pub fn local_now(&self, i: usize) -> Instant {
        self.local(i, self.now)
    }

    /// Changes node `i`'s clock rate from now on (its reading stays continuous). The rate stays
    /// within the node's own drift bound: beyond it no rule promises anything, so a scenario
    /// that asks for more is wrong, not the protocol.
    pub fn set_rate(&mut self, i: usize, rate: f64) {
        let r = self.timings_of(i).max_drift;
        assert!(
            (rate - 1.0).abs() <= r + 1e-9,
            "scenario bug: node {i}'s clock at rate {rate} is beyond its own drift bound {r}"
        );
        let local0 = self.slots[i].clock.local(self.now);
        self.slots[i].clock = Clock {
            true0: self.now,
            local0,
            rate,
        };
        // Timers were converted to true time at the old rate.
        self.reschedule(i);
    }

    pub fn rate(&self, i: usize) -> f64 {
        self.slots[i].clock.rate
    }

    /// The core's view of node `i` now, if it is up.
    pub fn view(&self, i: usize) -> Option<View> {
        let now = self.local_now(i);
        self.slots[i].node.as_ref().map(|n| n.view(now))
    }

    /// The other members as node `i` knows them now (empty when it is down).
    pub fn peers(&self, i: usize) -> Vec<Member> {
        let now = self.local_now(i);
        self.slots[i]
            .node
            .as_ref()
            .map(|n| n.peers(now))
            .unwrap_or_default()
    }

    /// Whether node `i` would answer `/readyz` with 200: it can vote and hears a quorum of
    /// members with its member set (the shell adds its transport's health).
    pub fn ready(&self, i: usize) -> bool {
        let Some(v) = self.view(i) else {
            return false;
        };
        Readiness::of(&v, &self.peers(i), &self.slots[i].config.members).ready()
    }

    /// Whether node `i` would answer "I am the leader" now: up, not frozen, and its API view
    /// holds an unexpired lease on its own clock. A stalled loop still answers (from its last
    /// snapshot); a frozen process does not answer at all.
    pub fn claims_leadership(&self, i: usize) -> bool {
        let now = self.local_now(i);
        self.slots[i].node.is_some()
            && self.slots[i].paused_until.is_none()
            && self.slots[i]
                .api
                .as_ref()
                .is_some_and(|v| v.is_leader_at(now))
    }

    /// The leader every running, unpaused node agrees on, if it also holds its lease.
    pub fn agreed_leader(&self) -> Option<(usize, u64)> {
        let all: Vec<usize> = (0..self.size()).collect();
        self.agreed_leader_among(&all)
    }

    /// The leader the running, unpaused nodes of `group` agree on, if it is one of them and
    /// answers as leader.
    pub fn agreed_leader_among(&self, group: &[usize]) -> Option<(usize, u64)> {
        let mut agreed: Option<(String, u64)> = None;
        for &i in group {
            if !self.is_up(i) || self.is_paused(i) {
                continue;
            }
            let v = self.slots[i].api.as_ref()?;
            let l = v.leader.clone()?;
            match &agreed {
                None => agreed = Some((l, v.term)),
                Some((a, t)) if *a == l && *t == v.term => {}
                Some(_) => return None,
            }
        }
        let (leader, term) = agreed?;
        let idx = group.iter().copied().find(|&i| *self.id(i) == leader)?;
        self.claims_leadership(idx).then_some((idx, term))
    }

    fn push(&mut self, at: u64, kind: Kind) {
        self.seq += 1;
        self.queue.push(Reverse(Event {
            at,
            seq: self.seq,
            kind,
        }));
    }

    fn start(&mut self, i: usize) {
        self.slots[i].incarnation += 1;
        let seed = self.rng.next_u64();
        let now = self.local(i, self.now);
        let slot = &mut self.slots[i];
        // The shell's first check has run: the core starts with its verdict (rule 17). The
        // previous build had no checks.
        slot.config.healthy = slot.healthy || slot.build != Build::Current;
        slot.core_healthy = slot.config.healthy;
        let mut config = slot.config.clone();
        if slot.build != Build::Current {
            // The previous build had no beat (rule 18).
            config.beat = None;
        }
        let node = (self.factory)(
            config,
            slot.persisted.clone(),
            now,
            seed,
            slot.incarnation << 32,
        );
        self.checker
            .on_start(self.now, &slot.config.node_id, &slot.config.timings);
        slot.running_build = slot.build;
        slot.node = Some(match slot.build {
            Build::Current => node,
            Build::Previous => Box::new(Filtered::previous(node)),
        });
        slot.inbox.clear();
        slot.running.clear();
        slot.paused_until = None;
        slot.stopping = None;
        slot.crash_after = None;
        slot.exec_missed = false;
        slot.core_maintenance = false;
        slot.named_at = None;
        slot.firings = slot.firings.restarted();
        slot.released = None;
        // The shell reads the maintenance it kept on disk before the loop's first step.
        let first = if slot.maintenance {
            Input::SetMaintenance { on: true }
        } else {
            Input::Tick
        };
        let _ = self.step(i, first);
        self.drain(i);
    }

    /// Whether node `i`'s shell keeps maintenance on (rule 16).
    pub fn in_maintenance(&self, i: usize) -> bool {
        self.slots[i].maintenance
    }

    /// Kills node `i` (`kill -9`): volatile state and the actions it had not run are lost,
    /// persisted state kept.
    pub fn crash(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.node = None;
        slot.view = None;
        slot.api = None;
        slot.wake_at = None;
        slot.paused_until = None;
        slot.inbox.clear();
        slot.running.clear();
        slot.stopping = None;
        slot.crash_after = None;
        slot.exec_missed = false;
        self.after_event();
    }

    /// Brings every node back up: armed crashes are disarmed, stopping nodes finish their stop
    /// (within the handover grace) and every node that is down is started.
    pub fn bring_all_up(&mut self) {
        for slot in &mut self.slots {
            slot.crash_after = None;
        }
        let grace = self.runtime.handover_grace + self.timings.election_timeout;
        let until = self.now() + grace;
        while (0..self.size()).any(|i| self.is_stopping(i)) && self.now() < until {
            let next = self.now() + Duration::from_millis(5);
            self.run_until(next);
        }
        for i in 0..self.size() {
            if self.is_stopping(i) {
                self.crash(i);
            }
            self.restart(i);
        }
    }

    /// Kills node `i` once it has run `n` more actions (0: before the next one).
    pub fn crash_after_actions(&mut self, i: usize, n: u32) {
        if self.slots[i].node.is_some() {
            self.slots[i].crash_after = Some(n);
        }
    }

    pub fn restart(&mut self, i: usize) {
        if self.slots[i].node.is_none() {
            self.start(i);
            self.after_event();
        }
    }

    /// Gives node `i` another member set, taking effect at its next start (as a restart with
    /// a new `--member` list does).
    pub fn reconfigure(&mut self, i: usize, members: &[String]) {
        let id = self.slots[i].config.node_id.clone();
        self.slots[i].config.members = member_set(&id, members);
    }

    /// SIGTERM: the node hands over if it leads and exits by itself (see [`Stopping`]).
    pub fn stop(&mut self, i: usize) {
        if self.slots[i].node.is_none() || self.slots[i].stopping.is_some() {
            return;
        }
        let now = self.local_now(i);
        let hand_over = self.slots[i]
            .node
            .as_ref()
            .is_some_and(|n| n.view(now).is_leader_at(now) && n.has_successor(now));
        self.slots[i].stopping = Some(Stopping {
            since: self.now,
            hand_over,
        });
        self.deliver(i, Input::Shutdown);
        self.after_event();
    }

    /// Stops node `i` for `d` of true time (SIGSTOP); messages queue up and are processed when
    /// it wakes.
    pub fn pause(&mut self, i: usize, d: Duration) {
        if self.slots[i].node.is_none() || self.slots[i].paused_until.is_some() {
            return;
        }
        let until = self.now + d.as_nanos() as u64;
        self.slots[i].paused_until = Some(until);
        self.push(until, Kind::Resume { node: i });
    }

    /// Drops everything `from` sends to `to` (one-way).
    pub fn block(&mut self, from: usize, to: usize) {
        self.blocked.insert((from, to));
    }

    pub fn unblock(&mut self, from: usize, to: usize) {
        self.blocked.remove(&(from, to));
    }

    /// Node `i` hears nobody (it still sends).
    pub fn deafen(&mut self, i: usize) {
        for j in 0..self.size() {
            if j != i {
                self.block(j, i);
            }
        }
    }

    /// Nobody hears node `i` (it still receives).
    pub fn mute(&mut self, i: usize) {
        for j in 0..self.size() {
            if j != i {
                self.block(i, j);
            }
        }
    }

    /// Splits the cluster: no message crosses between `side` and the rest.
    pub fn partition(&mut self, side: &[usize]) {
        for &a in side {
            for b in 0..self.size() {
                if !side.contains(&b) {
                    self.block(a, b);
                    self.block(b, a);
                }
            }
        }
    }

    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// The node whose API answers as leader now, if exactly one does.
    pub fn current_leader(&self) -> Option<usize> {
        let mut claims = (0..self.size()).filter(|&i| self.claims_leadership(i));
        let first = claims.next()?;
        claims.next().is_none().then_some(first)
    }

    /// Whether messages from `a` reach `b` (ignoring loss).
    pub fn link_up(&self, a: usize, b: usize) -> bool {
        !self.blocked.contains(&(a, b))
    }

    /// Gives an operator command to node `i`: `None` when it is down, frozen or busy (a busy
    /// loop takes the command after its step; the simulation only sends commands to idle nodes
    /// so that their answers can be checked).
    pub fn command(&mut self, i: usize, input: Input) -> Option<Result<Outcome, CommandError>> {
        if self.slots[i].paused_until.is_some() {
            // A frozen process takes no command (and its configuration does not change).
            return None;
        }
        if let Input::SetCandidacy { eligible, priority } = &input {
            // The operator's choice survives restarts of the simulated process, and is the
            // configuration a node that is down comes back with.
            self.slots[i].config.eligible = *eligible;
            if let Some(p) = priority {
                self.slots[i].config.priority = *p;
            }
        }
        if let Input::SetMaintenance { on } = &input {
            // Kept on disk by the shell, like the candidacy.
            self.slots[i].maintenance = *on;
        }
        self.slots[i].node.as_ref()?;
        if !self.slots[i].running.is_empty() {
            self.slots[i].inbox.push_back(input);
            return None;
        }
        let r = self.step(i, input);
        self.drain(i);
        self.after_event();
        Some(r)
    }

    /// Hands an input to node `i`'s loop: now if it is idle, else after the current step.
    fn deliver(&mut self, i: usize, input: Input) {
        let slot = &self.slots[i];
        if slot.node.is_none() {
            return;
        }
        if slot.paused_until.is_some() || !slot.running.is_empty() {
            self.slots[i].inbox.push_back(input);
            return;
        }
        let _ = self.step(i, input);
        self.drain(i);
    }

    /// Takes waiting inputs one step at a time while the loop is free.
    fn drain(&mut self, i: usize) {
        loop {
            let slot = &self.slots[i];
            if slot.node.is_none() || slot.paused_until.is_some() || !slot.running.is_empty() {
                return;
            }
            let Some(next) = self.slots[i].inbox.pop_front() else {
                return;
            };
            let _ = self.step(i, next);
        }
    }

    /// One step of the modelled runtime: `handle`, the API snapshot (rule 9), then the actions.
    fn step(&mut self, i: usize, input: Input) -> Result<Outcome, CommandError> {
        let now = self.local(i, self.now);
        if let Input::Message(m) = &input {
            // What the core takes, from the run that sent it (the high half of `seq` is the
            // sender's incarnation); a build drops a version it cannot read unread, which
            // teaches it nothing.
            if let Some(from) = self.index_of(&m.from) {
                if self.build(i).speaks().speaks(m.v) {
                    let run = self.heard[i][from].max(Some(m.seq >> 32));
                    self.heard[i][from] = run;
                }
            }
        }
        // Rule 1 for observers: a message of one changes nothing. Its receiver's twin takes the
        // same instant without it; both must end in the same state, with the same actions.
        let from_observer = match &input {
            Input::Message(m) if self.observers.contains(&m.from) => Some(m.body.kind()),
            _ => None,
        };
        let twin = from_observer
            .filter(|_| self.slots[i].running_build == Build::Current)
            .and_then(|_| self.slots[i].node.as_ref().and_then(|n| n.twin()));
        let named = matches!(&input, Input::Message(m) if matches!(&m.body,
            Body::Resign { successor: Some(s), .. } if *s == self.slots[i].config.node_id));
        if let Input::SetMaintenance { on } = &input {
            self.slots[i].core_maintenance = *on;
        }
        if let Input::Message(m) = &input {
            // The shell takes the record first: the vote that makes this node leader has
            // brought it (rule 19).
            self.firing_heard(i, m);
        }
        if let Input::SetHealth { healthy } = &input {
            self.slots[i].core_healthy = *healthy || self.slots[i].running_build != Build::Current;
        }
        let Some(node) = self.slots[i].node.as_mut() else {
            return Ok(Outcome::Ignored);
        };
        let observer_from = match &input {
            Input::Message(m) => m.from.clone(),
            _ => String::new(),
        };
        let result = node.handle(now, input);
        let mut out = VecDeque::new();
        while let Some(a) = node.poll_action() {
            out.push_back(a);
        }
        if let Some(mut twin) = twin {
            let _ = twin.handle(now, Input::Tick);
            let theirs: VecDeque<Action> = std::iter::from_fn(|| twin.poll_action()).collect();
            if theirs != out || twin.digest() != node.digest() {
                let what = format!(
                    "rule 1: a {} message of observer {observer_from} changed node {i} \
                     ({result:?}, {} actions against {} without it)",
                    from_observer.unwrap_or("?"),
                    out.len(),
                    theirs.len()
                );
                self.checker.violate(self.now, what);
            }
        }
        let view = node.view(now);
        if named && result == Ok(Outcome::Accepted) {
            self.slots[i].named_at = Some(self.now);
        }
        self.check_health(i, now, &view);
        let slot = &self.slots[i];
        self.checker
            .on_view(self.now, i, &slot.config, &slot.persisted, &view);
        self.slots[i].view = Some(view.clone());
        if !self.runtime.snapshot_after_actions {
            self.slots[i].api = Some(view);
        }
        self.slots[i].running = out;
        self.run_actions(i);
        result
    }

    /// Runs the step's actions that take no time now and schedules the next one that does.
    fn run_actions(&mut self, i: usize) {
        loop {
            let Some(front) = self.slots[i].running.front() else {
                self.step_done(i);
                return;
            };
            let persist = matches!(front, Action::Persist(_));
            let cost = self.cost(i, persist);
            if cost > 0 {
                let incarnation = self.slots[i].incarnation;
                self.push(
                    self.now + cost,
                    Kind::Exec {
                        node: i,
                        incarnation,
                    },
                );
                return;
            }
            if !self.run_one(i) {
                return;
            }
        }
    }

    /// How long an action of node `i` holds the loop (ns).
    fn cost(&mut self, i: usize, persist: bool) -> u64 {
        let m = &self.runtime;
        let mut cost = if persist {
            self.rng.below(m.fsync_max.as_nanos() as u64 + 1)
        } else {
            0
        };
        if m.stall_chance > 0.0 && self.rng.chance(m.stall_chance) {
            cost += self.rng.below(m.stall_max.as_nanos() as u64 + 1);
            let slot = &mut self.slots[i];
            slot.stalled_until = slot.stalled_until.max(self.now + cost);
        }
        cost
    }

    /// Runs the next action of node `i`; false when the node crashed instead.
    fn run_one(&mut self, i: usize) -> bool {
        if let Some(left) = self.slots[i].crash_after {
            if left == 0 {
                self.crash(i);
                return false;
            }
            self.slots[i].crash_after = Some(left - 1);
        }
        let Some(a) = self.slots[i].running.pop_front() else {
            return true;
        };
        match a {
            Action::Release { term } => self.slots[i].released = Some(term),
            Action::Persist(p) => {
                self.checker
                    .on_persist(self.now, i, &self.slots[i].persisted, &p);
                self.slots[i].persisted = p;
            }
            Action::Publish(mut m) => {
                m.firing = self.firing_sent(i);
                let claims = self.claims_leadership(i);
                self.checker
                    .on_send(self.now, i, &self.slots[i].persisted, claims, &m);
                self.check_version(i, &m);
                self.check_maintenance(i, &m);
                self.check_release(i, &m);
                if matches!(m.body, Body::Heartbeat { .. } | Body::Leader { .. }) {
                    let id = self.slots[i].config.node_id.clone();
                    self.checker.on_leader_word(self.now, &id, m.term);
                }
                if let Body::Resign { successor, .. } = &m.body {
                    self.slots[i].last_resign = Some((self.now, successor.clone()));
                }
                self.send(i, m);
            }
            Action::Transition(t) => self.transitions.push((self.now, i, t)),
        }
        true
    }

    /// The step is over: the snapshot is refreshed and the timer set (the caller takes the next
    /// input).
    fn step_done(&mut self, i: usize) {
        let now = self.local(i, self.now);
        let Some(node) = self.slots[i].node.as_ref() else {
            return;
        };
        let view = node.view(now);
        let timeout = node.poll_timeout();
        // Rule 18: on the beat or not, nothing a node sends on it comes later than its bound.
        if let Some((last, next, most)) = node.beat_check() {
            if next > last + most {
                let what = format!(
                    "rule 18: {} sends next {:?} after its last message, more than {most:?}",
                    self.slots[i].config.node_id,
                    next - last
                );
                self.checker.violate(self.now, what);
            }
        }
        self.fire(i, &view);
        self.check_firings(i, &view);
        self.slots[i].api = Some(view);
        match timeout {
            Some(at) => {
                let due = self.true_time(i, at);
                if due <= self.now {
                    self.slots[i].overdue += 1;
                    if self.slots[i].overdue == 1000 {
                        let what = format!(
                            "node {i} keeps asking to be woken at a time already past (busy loop)"
                        );
                        self.checker.violate(self.now, what);
                    }
                } else {
                    self.slots[i].overdue = 0;
                }
                let mut t = due.max(self.now + 1);
                if self.slots[i].overdue >= 1000 {
                    // Reported; keep the simulation moving.
                    t = self.now + self.timings.heartbeat.as_nanos() as u64;
                }
                if self.slots[i].wake_at != Some(t) {
                    self.slots[i].wake_at = Some(t);
                    self.push(t, Kind::Wake { node: i });
                }
            }
            None => self.slots[i].wake_at = None,
        }
    }

    /// Recomputes node `i`'s wake-up after its clock changed.
    fn reschedule(&mut self, i: usize) {
        if self.slots[i].node.is_none() || !self.slots[i].running.is_empty() {
            return;
        }
        self.slots[i].wake_at = None;
        if let Some(at) = self.slots[i].node.as_ref().and_then(|n| n.poll_timeout()) {
            let t = self.true_time(i, at).max(self.now + 1);
            self.slots[i].wake_at = Some(t);
            self.push(t, Kind::Wake { node: i });
        }
    }

    fn send(&mut self, from: usize, m: Message) {
        self.stats.published += 1;
        // Through the wire format, as in production: what the core emits must parse back.
        let m = match Message::parse(m.to_json().as_bytes()) {
            Ok(back) => back,
            Err(e) => {
                self.checker.violate(
                    self.now,
                    format!("node {from} sent an unparsable message: {e}"),
                );
                return;
            }
        };
        self.send_to_observer(from, &m);
        for to in 0..self.size() {
            if to == from || self.blocked.contains(&(from, to)) {
                continue;
            }
            let link = self.net.link_loss.get(&(from, to)).copied().unwrap_or(0.0);
            if self.rng.chance(self.net.loss) || (link > 0.0 && self.rng.chance(link)) {
                continue;
            }
            let copies = if self.rng.chance(self.net.duplicate) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let span = self.net.max_delay.saturating_sub(self.net.min_delay);
                let mut delay =
                    self.net.min_delay.as_nanos() as u64 + self.rng.below(span.as_nanos() as u64);
                if self.net.long_delay_chance > 0.0 && self.rng.chance(self.net.long_delay_chance) {
                    delay += self.rng.below(self.net.long_delay.as_nanos() as u64 + 1);
                }
                if let Some(slow) = self.net.link_delay.get(&(from, to)) {
                    delay += slow.as_nanos() as u64;
                }
                self.push(
                    self.now + delay.max(1),
                    Kind::Deliver {
                        to,
                        msg: Box::new(m.clone()),
                    },
                );
            }
        }
    }

    fn after_event(&mut self) {
        self.finish_stops();
        let claims: Vec<usize> = (0..self.size())
            .filter(|&i| self.claims_leadership(i))
            .collect();
        let ids: Vec<String> = claims.iter().map(|&i| self.id(i).to_string()).collect();
        self.checker.on_claims(self.now, &ids);
        for &l in &claims {
            self.check_bound_quorum(l);
        }
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.config.node_id == id)
    }

    /// Rules 5, 6 and 8 as one promise, checked at every event in true time: while node `l`
    /// answers as leader, a quorum of its members refuses to vote for anyone else. A member
    /// counts when it is `l`, when its promise (rule 5) is to `l`, when it cannot vote at all
    /// (its start-up guard, rule 8), or when it is down or frozen (it votes for nobody, and a
    /// restart brings up the start-up guard). Outcomes alone (two leaders) show a broken promise
    /// only when a rare schedule turns it into a second leader; this sees it at once.
    fn check_bound_quorum(&mut self, l: usize) {
        let leader = self.slots[l].config.node_id.clone();
        let members = self.slots[l].config.members.clone();
        let bound = members
            .ids()
            .filter(|id| {
                let Some(j) = self.index_of(id) else {
                    return true;
                };
                if j == l || !self.is_up(j) || self.is_paused(j) {
                    return true;
                }
                let v = self.view(j).expect("up");
                !v.can_vote || v.promise.as_ref().is_some_and(|(h, _)| *h == leader)
            })
            .count();
        if bound < members.quorum() {
            let free: Vec<String> = members
                .ids()
                .filter_map(|id| {
                    let j = self.index_of(id)?;
                    let v = self.view(j)?;
                    (j != l
                        && !self.is_paused(j)
                        && v.can_vote
                        && v.promise.as_ref().is_none_or(|(h, _)| *h != leader))
                    .then(|| format!("{id} (promise {:?})", v.promise.map(|p| p.0)))
                })
                .collect();
            let what = format!(
                "{leader} answers as leader while only {bound} of its members refuse other votes \
                 (quorum {}; free to vote: {free:?}): {}",
                members.quorum(),
                self.describe()
            );
            self.checker.violate(self.now, what);
        }
    }

    /// The core asks its shell to stop what acts on its leadership before every resign it
    /// sends (`Action::Release`): a resign of a term with no release of that term before it,
    /// in this run, would let a successor lead beside an `--exec` child or a job still running.
    fn check_release(&mut self, from: usize, m: &Message) {
        let slot = &self.slots[from];
        if slot.running_build != Build::Current || !matches!(m.body, Body::Resign { .. }) {
            return;
        }
        if slot.released != Some(m.term) {
            let what = format!(
                "{} sent a resign of term {} after releasing {:?}",
                slot.config.node_id, m.term, slot.released
            );
            self.checker.violate(self.now, what);
        }
    }

    /// Rule 16: a node whose core was told maintenance is on campaigns only when a leader's
    /// resign named it, and only while it is favored (`T` on its clock; twice that in true time
    /// leaves room for any drift). Checked at every send of a pre-vote or vote request of its own.
    fn check_maintenance(&mut self, from: usize, m: &Message) {
        let slot = &self.slots[from];
        let Body::Election {
            candidate,
            pre_vote,
            ..
        } = &m.body
        else {
            return;
        };
        if !slot.core_maintenance
            || slot.running_build != Build::Current
            || *candidate != slot.config.node_id
        {
            return;
        }
        let window = slot.config.timings.election_timeout.as_nanos() as u64 * 2;
        if slot.named_at.is_some_and(|at| self.now < at + window) {
            return;
        }
        let what = format!(
            "rule 16: {} campaigned in maintenance (pre_vote={pre_vote}, term {}) without a \
             resign naming it (last named at {:?})",
            candidate,
            m.term,
            slot.named_at.map(Duration::from_nanos)
        );
        self.checker.violate(self.now, what);
    }

    /// Rule 17: after every step of a node whose core was told its application is unhealthy
    /// (and not told maintenance is on), if it answers as leader and has led for `T`, it knows
    /// no member it should have handed over to: healthy, eligible and viable for `T`.
    fn check_health(&mut self, i: usize, now: Instant, view: &View) {
        let slot = &self.slots[i];
        if slot.core_healthy || slot.core_maintenance || !view.is_leader_at(now) {
            return;
        }
        let t = slot.config.timings.election_timeout;
        if view.leader_since.is_none_or(|s| now < s + t) {
            return;
        }
        let Some(node) = slot.node.as_ref() else {
            return;
        };
        let due = node.peers(now).into_iter().find(|m| {
            m.healthy == Some(true)
                && m.candidacy == Some(Candidacy::Eligible)
                && m.viable
                && m.eligible_since.is_some_and(|s| now >= s + t)
        });
        if let Some(m) = due {
            let what = format!(
                "rule 17: {} leads unhealthy in term {} although {} is healthy, eligible and \
                 viable since {:?} ago",
                slot.config.node_id,
                view.term,
                m.id,
                now - m.eligible_since.unwrap_or(now)
            );
            self.checker.violate(self.now, what);
        }
    }

    /// `m` from a sender outside the member set (an observer), to every node over the network
    /// as it is (loss and delay apply). Every delivery is checked to change nothing
    /// (`World::step`).
    pub fn send_as_observer(&mut self, m: Message) {
        self.observers.insert(m.from.clone());
        for to in 0..self.size() {
            if self.rng.chance(self.net.loss) {
                continue;
            }
            let span = self.net.max_delay.saturating_sub(self.net.min_delay);
            let delay =
                self.net.min_delay.as_nanos() as u64 + self.rng.below(span.as_nanos() as u64);
            self.push(
                self.now + delay.max(1),
                Kind::Deliver {
                    to,
                    msg: Box::new(m.clone()),
                },
            );
        }
    }

    /// The member set's fingerprint, as every node of the world's own set shows it.
    pub fn fingerprint(&self) -> String {
        self.slots[0].config.members.fingerprint().to_string()
    }

    /// Whether node `i`'s application is healthy, as its shell's check sees it (rule 17).
    pub fn is_healthy(&self, i: usize) -> bool {
        self.slots[i].healthy
    }

    /// Node `i`'s application becomes healthy or not: its shell's check tells the loop, which
    /// takes it after its current step (a frozen process when it resumes; a node that is down
    /// finds it at its next start).
    pub fn set_health(&mut self, i: usize, healthy: bool) {
        self.slots[i].healthy = healthy;
        self.deliver(i, Input::SetHealth { healthy });
        self.after_event();
    }

    /// Rule 15: a node never writes a version that a member it has heard from (in that member's
    /// current run) cannot read: it would be deaf to it.
    fn check_version(&mut self, from: usize, m: &Message) {
        for to in 0..self.size() {
            let heard = self.heard[from][to];
            if to == from || !self.is_up(to) || heard != Some(self.slots[to].incarnation) {
                continue;
            }
            let reads = self.build(to).speaks();
            if !reads.speaks(m.v) {
                let what = format!(
                    "{} wrote version {} though it heard {} (which reads {:?}) in its current run",
                    self.id(from),
                    m.v,
                    self.id(to),
                    reads
                );
                self.checker.violate(self.now, what);
            }
        }
    }

    /// Stopping nodes exit as the runtime does: once the successor leads, at once if they did
    /// not lead or have nobody to hand over to, or when the grace is over.
    fn finish_stops(&mut self) {
        for i in 0..self.size() {
            let Some(s) = self.slots[i].stopping else {
                continue;
            };
            if !self.slots[i].running.is_empty() || self.slots[i].paused_until.is_some() {
                continue;
            }
            // The runtime's own policy (rule 13), on the view its loop last published.
            let waited = Duration::from_nanos(self.now - s.since);
            let exits = match self.slots[i].view.as_ref() {
                Some(view) => {
                    pilot_election_core::stop::exit_now(s.hand_over, view, waited).is_some()
                }
                None => !s.hand_over,
            };
            if exits || waited >= self.runtime.handover_grace {
                self.crash(i);
            }
        }
    }

    /// Runs every event up to true time `until`.
    pub fn run_until(&mut self, until: Duration) {
        let until = until.as_nanos() as u64;
        let mut same_instant = 0u32;
        while let Some(Reverse(ev)) = self.queue.peek() {
            if ev.at > until {
                break;
            }
            let Reverse(ev) = self.queue.pop().expect("peeked");
            if ev.at == self.now {
                same_instant += 1;
                if same_instant > MAX_EVENTS_PER_INSTANT {
                    self.checker
                        .violate(self.now, "event storm: a node keeps waking at one instant");
                    return;
                }
            } else {
                same_instant = 0;
            }
            self.now = ev.at;
            self.stats.events += 1;
            if let Some((from, to)) = self.watch_window {
                if ev.at >= from && ev.at <= to {
                    eprintln!("{:>10.4}s {:?}", ev.at as f64 / 1e9, ev.kind);
                }
            }
            match ev.kind {
                Kind::Deliver { to, msg } => {
                    if self.slots[to].node.is_none() {
                        continue;
                    }
                    self.stats.delivered += 1;
                    self.deliver(to, Input::Message(*msg));
                }
                Kind::Observe { msg } => self.observe_one(*msg),
                Kind::Wake { node } => {
                    let slot = &self.slots[node];
                    if slot.wake_at != Some(ev.at)
                        || slot.paused_until.is_some()
                        || !slot.running.is_empty()
                    {
                        continue;
                    }
                    self.slots[node].wake_at = None;
                    let _ = self.step(node, Input::Tick);
                    self.drain(node);
                }
                Kind::Resume { node } => {
                    if self.slots[node].paused_until != Some(ev.at) {
                        continue;
                    }
                    self.slots[node].paused_until = None;
                    if self.slots[node].exec_missed {
                        // Frozen in the middle of a step: it goes on where it stopped.
                        self.slots[node].exec_missed = false;
                        let incarnation = self.slots[node].incarnation;
                        self.push(self.now, Kind::Exec { node, incarnation });
                    } else if self.slots[node].running.is_empty() {
                        if self.slots[node].inbox.is_empty() {
                            let _ = self.step(node, Input::Tick);
                        }
                        self.drain(node);
                    }
                }
                Kind::Exec { node, incarnation } => {
                    let slot = &self.slots[node];
                    if slot.node.is_none() || slot.incarnation != incarnation {
                        continue;
                    }
                    if slot.paused_until.is_some() {
                        self.slots[node].exec_missed = true;
                        continue;
                    }
                    if self.run_one(node) {
                        self.run_actions(node);
                        self.drain(node);
                    }
                }
            }
            self.after_event();
        }
        self.now = self.now.max(until);
        self.after_event();
    }

    /// Roles of every node, for debugging output.
    pub fn describe(&self) -> String {
        (0..self.size())
            .map(|i| {
                let state = match (&self.slots[i].view, self.is_up(i), self.is_paused(i)) {
                    (_, false, _) => "down".to_string(),
                    (Some(v), true, paused) => format!(
                        "{:?} t{} leader={:?} {}{}{}{}",
                        v.role,
                        v.term,
                        v.leader,
                        self.view(i).map_or("", |v| v.candidacy.as_str()),
                        self.view(i)
                            .and_then(|v| v.promise)
                            .map(|(h, _)| format!(" promised={h}"))
                            .unwrap_or_default(),
                        if paused { " (paused)" } else { "" },
                        if self.is_stopping(i) {
                            " (stopping)"
                        } else {
                            ""
                        }
                    ),
                    (None, true, _) => "starting".to_string(),
                };
                let c = &self.slots[i].config;
                let cand = if c.eligible { "" } else { " no-candidate" };
                format!(
                    "{}(p{}{cand} m{})={}",
                    self.id(i),
                    c.priority,
                    c.members.fingerprint(),
                    state
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// True when node `i` is the top-ranked eligible node that is up, among `group`.
    pub fn is_top_ranked_among(&self, i: usize, group: &[usize]) -> bool {
        let rank = |j: usize| {
            pilot_election_core::Rank::new(
                self.slots[j].config.priority,
                &self.slots[j].config.node_id,
            )
        };
        group
            .iter()
            .copied()
            .filter(|&j| self.is_up(j) && self.slots[j].config.eligible)
            .max_by(|&a, &b| rank(a).cmp(&rank(b)))
            == Some(i)
    }

    /// True when node `i` is the top-ranked eligible node that is up.
    pub fn is_top_ranked(&self, i: usize) -> bool {
        let all: Vec<usize> = (0..self.size()).collect();
        self.is_top_ranked_among(i, &all)
    }

    pub fn role(&self, i: usize) -> Option<Role> {
        self.slots[i].view.as_ref().map(|v| v.role)
    }

    /// The group name every node runs with.
    pub fn group(&self) -> &str {
        &self.group
    }
}
