//! The simulated world: nodes, a lossy broadcast network, drifting clocks, crashes and pauses.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::time::Duration;

use tokio::time::Instant;

use super::checker::Checker;
use crate::election::{
    Action, CommandError, Config, Input, Message, Node, Outcome, Persistent, Rng, Role, Timings,
    Transition, View,
};

/// What the simulator needs from an election implementation.
pub trait Protocol {
    fn handle(&mut self, now: Instant, input: Input) -> Result<Outcome, CommandError>;
    fn poll_action(&mut self) -> Option<Action>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn view(&self, now: Instant) -> View;
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
}

/// Builds a node: configuration, persisted state, local start time, seed, first sequence number.
pub type Factory = Box<dyn Fn(Config, Persistent, Instant, u64, u64) -> Box<dyn Protocol>>;

/// The factory for the real core.
pub fn core_factory() -> Factory {
    Box::new(|c, p, now, seed, seq| Box::new(Node::new(c, p, now, seed, seq)))
}

/// The cluster to simulate.
pub struct WorldConfig {
    pub seed: u64,
    pub group: String,
    pub timings: Timings,
    /// `(id, priority, eligible)` per node.
    pub nodes: Vec<(String, u32, bool)>,
    /// Clock rate per node; 1.0 is true time.
    pub rates: Vec<f64>,
}

/// One node's place in the world; survives crashes (the persisted state lives here).
struct Slot {
    config: Config,
    node: Option<Box<dyn Protocol>>,
    persisted: Persistent,
    incarnation: u64,
    rate: f64,
    paused_until: Option<u64>,
    backlog: Vec<Message>,
    wake_at: Option<u64>,
    view: Option<View>,
}

#[derive(Debug)]
enum Kind {
    Deliver { to: usize, msg: Message },
    Wake { node: usize },
    Resume { node: usize },
}

#[derive(Debug)]
struct Event {
    at: u64,
    seq: u64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Network behaviour, changeable at any time.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub loss: f64,
    pub duplicate: f64,
    pub min_delay: Duration,
    pub max_delay: Duration,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            loss: 0.0,
            duplicate: 0.0,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(20),
        }
    }
}

/// Counters a scenario reads after a run.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub published: u64,
    pub delivered: u64,
    pub events: u64,
}

/// A whole simulated cluster.
pub struct World {
    factory: Factory,
    base: Instant,
    now: u64,
    seq: u64,
    rng: Rng,
    slots: Vec<Slot>,
    queue: BinaryHeap<Reverse<Event>>,
    blocked: BTreeSet<(usize, usize)>,
    pub net: NetConfig,
    pub checker: Checker,
    pub stats: Stats,
    /// Every transition any node reported: (true time ns, node index, transition).
    pub transitions: Vec<(u64, usize, Transition)>,
}

const MAX_EVENTS_PER_INSTANT: u32 = 10_000;

impl World {
    pub fn new(config: WorldConfig, factory: Factory) -> World {
        let base = Instant::now();
        let n = config.nodes.len();
        let slots = config
            .nodes
            .iter()
            .enumerate()
            .map(|(i, (id, priority, eligible))| Slot {
                config: Config {
                    node_id: id.clone(),
                    group: config.group.clone(),
                    cluster_size: n,
                    priority: *priority,
                    eligible: *eligible,
                    timings: config.timings,
                },
                node: None,
                persisted: Persistent::default(),
                incarnation: 0,
                rate: config.rates.get(i).copied().unwrap_or(1.0),
                paused_until: None,
                backlog: Vec::new(),
                wake_at: None,
                view: None,
            })
            .collect();
        let mut w = World {
            factory,
            base,
            now: 0,
            seq: 0,
            rng: Rng::new(config.seed ^ 0x005E_ED0F_0B5E_55ED),
            slots,
            queue: BinaryHeap::new(),
            blocked: BTreeSet::new(),
            net: NetConfig::default(),
            checker: Checker::new(n, config.timings),
            stats: Stats::default(),
            transitions: Vec::new(),
        };
        for i in 0..n {
            w.start(i);
        }
        w
    }

    pub fn size(&self) -> usize {
        self.slots.len()
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

    pub fn persisted(&self, i: usize) -> &Persistent {
        &self.slots[i].persisted
    }

    /// The node's own clock at true time `t` (ns).
    fn local(&self, i: usize, t: u64) -> Instant {
        self.base + Duration::from_nanos((t as f64 * self.slots[i].rate) as u64)
    }

    /// The first true time at which node `i`'s clock reads at least `at`.
    fn true_time(&self, i: usize, at: Instant) -> u64 {
        let local = at.saturating_duration_since(self.base).as_nanos() as f64;
        let mut t = (local / self.slots[i].rate).ceil() as u64;
        while self.local(i, t) < at {
            t += 1;
        }
        t
    }

    pub fn local_now(&self, i: usize) -> Instant {
        self.local(i, self.now)
    }

    /// The view of node `i` now, if it is up.
    pub fn view(&self, i: usize) -> Option<View> {
        let now = self.local_now(i);
        self.slots[i].node.as_ref().map(|n| n.view(now))
    }

    /// Whether node `i` would answer "I am the leader" now.
    pub fn claims_leadership(&self, i: usize) -> bool {
        let now = self.local_now(i);
        self.slots[i]
            .view
            .as_ref()
            .is_some_and(|v| self.slots[i].node.is_some() && v.is_leader_at(now))
    }

    /// The leader every running, unpaused node agrees on, if it also holds its lease.
    pub fn agreed_leader(&self) -> Option<(usize, u64)> {
        let mut agreed: Option<(String, u64)> = None;
        for i in 0..self.size() {
            if !self.is_up(i) || self.is_paused(i) {
                continue;
            }
            let v = self.slots[i].view.as_ref()?;
            let l = v.leader.clone()?;
            match &agreed {
                None => agreed = Some((l, v.term)),
                Some((a, t)) if *a == l && *t == v.term => {}
                Some(_) => return None,
            }
        }
        let (leader, term) = agreed?;
        let idx = (0..self.size()).find(|&i| *self.id(i) == leader)?;
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
        let slot = &mut self.slots[i];
        slot.incarnation += 1;
        let seed = self.rng.next_u64();
        let now = self.local(i, self.now);
        let slot = &mut self.slots[i];
        let node = (self.factory)(
            slot.config.clone(),
            slot.persisted.clone(),
            now,
            seed,
            slot.incarnation << 32,
        );
        slot.node = Some(node);
        slot.backlog.clear();
        slot.paused_until = None;
        let _ = self.step(i, Input::Tick);
    }

    /// Kills node `i`: volatile state is lost, persisted state kept.
    pub fn crash(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.node = None;
        slot.view = None;
        slot.wake_at = None;
        slot.paused_until = None;
        slot.backlog.clear();
        self.after_event();
    }

    pub fn restart(&mut self, i: usize) {
        if self.slots[i].node.is_none() {
            self.start(i);
            self.after_event();
        }
    }

    /// Stops node `i` for `d` of true time; messages queue up and are processed when it wakes.
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

    /// Gives an operator command to node `i`; `None` when it is down or paused.
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
        self.slots[i].node.as_ref()?;
        let r = self.step(i, input);
        self.after_event();
        Some(r)
    }

    /// Feeds one input to node `i` and executes what it asks for.
    fn step(&mut self, i: usize, input: Input) -> Result<Outcome, CommandError> {
        let now = self.local(i, self.now);
        let Some(node) = self.slots[i].node.as_mut() else {
            return Ok(Outcome::Ignored);
        };
        let result = node.handle(now, input);
        let mut out = Vec::new();
        while let Some(a) = node.poll_action() {
            out.push(a);
        }
        let timeout = node.poll_timeout();
        let view = node.view(now);
        for a in out {
            match a {
                Action::Persist(p) => {
                    self.checker
                        .on_persist(self.now, i, &self.slots[i].persisted, &p);
                    self.slots[i].persisted = p;
                }
                Action::Publish(m) => self.send(i, m),
                Action::Transition(t) => self.transitions.push((self.now, i, t)),
                Action::StateChanged(_) => {}
            }
        }
        self.checker
            .on_view(self.now, i, &self.slots[i].config, &view);
        self.slots[i].view = Some(view);
        match timeout {
            Some(at) => {
                let t = self.true_time(i, at).max(self.now + 1);
                if self.slots[i].wake_at != Some(t) {
                    self.slots[i].wake_at = Some(t);
                    self.push(t, Kind::Wake { node: i });
                }
            }
            None => self.slots[i].wake_at = None,
        }
        result
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
        for to in 0..self.size() {
            if to == from || self.blocked.contains(&(from, to)) {
                continue;
            }
            if self.rng.chance(self.net.loss) {
                continue;
            }
            let copies = if self.rng.chance(self.net.duplicate) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let span = self.net.max_delay.saturating_sub(self.net.min_delay);
                let delay =
                    self.net.min_delay.as_nanos() as u64 + self.rng.below(span.as_nanos() as u64);
                self.push(
                    self.now + delay.max(1),
                    Kind::Deliver { to, msg: m.clone() },
                );
            }
        }
    }

    fn after_event(&mut self) {
        let claims: Vec<usize> = (0..self.size())
            .filter(|&i| self.claims_leadership(i))
            .collect();
        let ids: Vec<String> = claims.iter().map(|&i| self.id(i).to_string()).collect();
        self.checker.on_claims(self.now, &ids);
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
            match ev.kind {
                Kind::Deliver { to, msg } => {
                    let slot = &mut self.slots[to];
                    if slot.node.is_none() {
                        continue;
                    }
                    if slot.paused_until.is_some() {
                        slot.backlog.push(msg);
                        continue;
                    }
                    self.stats.delivered += 1;
                    let _ = self.step(to, Input::Message(msg));
                }
                Kind::Wake { node } => {
                    let slot = &self.slots[node];
                    if slot.wake_at != Some(ev.at) || slot.paused_until.is_some() {
                        continue;
                    }
                    self.slots[node].wake_at = None;
                    let _ = self.step(node, Input::Tick);
                }
                Kind::Resume { node } => {
                    if self.slots[node].paused_until != Some(ev.at) {
                        continue;
                    }
                    self.slots[node].paused_until = None;
                    let backlog = std::mem::take(&mut self.slots[node].backlog);
                    for m in backlog {
                        self.stats.delivered += 1;
                        let _ = self.step(node, Input::Message(m));
                    }
                    let _ = self.step(node, Input::Tick);
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
                        "{:?} t{} leader={:?}{}",
                        v.role,
                        v.term,
                        v.leader,
                        if paused { " (paused)" } else { "" }
                    ),
                    (None, true, _) => "starting".to_string(),
                };
                let c = &self.slots[i].config;
                let cand = if c.eligible { "" } else { " no-candidate" };
                format!("{}(p{}{cand})={}", self.id(i), c.priority, state)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// True when node `i` is the top-ranked eligible node that is up.
    pub fn is_top_ranked(&self, i: usize) -> bool {
        let rank = |j: usize| {
            (
                self.slots[j].config.priority,
                self.slots[j].config.node_id.clone(),
            )
        };
        (0..self.size())
            .filter(|&j| self.is_up(j) && self.slots[j].config.eligible)
            .max_by_key(|&j| rank(j))
            == Some(i)
    }

    pub fn role(&self, i: usize) -> Option<Role> {
        self.slots[i].view.as_ref().map(|v| v.role)
    }
}
