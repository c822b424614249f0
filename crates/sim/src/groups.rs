//! Many groups on every node: the simulator's model of the runtime's multiplexing
//! (docs/protocol.md, rule 18; `src/runtime/outbox.rs` in the service), checked per group.
//!
//! Every node runs one election core per group, as the service does, and one loop around them:
//! a turn takes one input (a wire message from a peer, which may be a batch of many groups'
//! messages, or a wake-up), hands each message to the election of its group, and gathers every
//! election's actions. Then the turn is flushed as the runtime's outbox flushes it: the state of
//! every group the turn changed is written with one fsync (the book), and only then do the
//! turn's messages leave, packed by the core's own [`batch::pack`] into one wire message per
//! peer (split at the transport's size limit). Inputs that arrive during the fsync wait.
//!
//! Operators add and remove groups one node at a time while nodes crash, restart, and lose or
//! delay messages across partitions; a removed group's state stays in the book, so adding it
//! back restores its term and vote. After every event the [`Checker`] of each group checks its
//! invariants (one leader per term, never two nodes answering as leader at once, nothing sent
//! before it is on disk, terms never going back, a leader's quorum bound by its promises), and
//! once the faults heal every group must elect.
//!
//! [`Mix`] holds deliberately broken variants of the multiplexing, each mixing up two groups'
//! state or the order of the shared fsync; `tests/groups.rs` shows that the checkers catch each.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::checker::{Checker, Violation};
use crate::world::{beat_offset, Event};
use pilot_election_core::batch::{self, Batch};
use pilot_election_core::{
    Action, Config, Input, MemberSet, Message, Node, Persistent, Rng, Timings, View,
};

/// A way of getting the multiplexing wrong, to show that the checkers catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// As the runtime does it.
    None,
    /// A turn's messages leave before the fsync of its state has finished.
    SendBeforeFsync,
    /// A turn's write keeps only the last group whose state changed (the others are lost).
    OneGroupPerFsync,
    /// A restarted node reads each group's state from the entry of the next group in the book.
    CrossedBook,
    /// Removing a group forgets its state: added back, it starts from term 0 with no vote.
    ForgetOnRemove,
}

/// One seed's cluster and how its runtime behaves.
#[derive(Debug, Clone)]
pub struct GroupsConfig {
    pub seed: u64,
    pub size: usize,
    pub timings: Timings,
    /// Each group's fsync of a turn takes up to this long.
    pub fsync_max: Duration,
    /// The transport's largest wire message: batches are split at it.
    pub batch_max: usize,
    pub mix: Mix,
}

/// One group's election on one node.
struct Election {
    node: Node,
    config: Config,
    /// What its API answers from: the view after its last step (rule 9).
    api: View,
    /// An operator removed the group: it goes once its last turn (its resign) has left.
    removing: bool,
}

/// One turn's state and messages, waiting for the fsync.
#[derive(Default)]
struct Turn {
    book: BTreeMap<String, Persistent>,
    messages: Vec<(String, Message)>,
}

enum HostInput {
    Wire(Arc<[u8]>),
    /// A wake-up: the elections whose timer is due tick.
    Tick,
    /// Elections just started tick at once, due or not (as the runtime's first step does).
    Started(Vec<String>),
    Command(String, Box<Input>),
}

/// One node: its elections, its book (every group's persisted state, kept across crashes and
/// removals) and the groups it takes part in (on disk too).
struct Host {
    id: String,
    priority: u32,
    rate: f64,
    up: bool,
    incarnation: u64,
    groups: BTreeSet<String>,
    book: BTreeMap<String, Persistent>,
    elections: BTreeMap<String, Election>,
    inbox: VecDeque<HostInput>,
    flushing: bool,
    wake_gen: u64,
}

#[derive(Debug)]
enum Kind {
    Deliver { to: usize, bytes: Arc<[u8]> },
    Wake { node: usize, gen: u64 },
    Flushed { node: usize, incarnation: u64 },
}

/// The turns flushed while waiting, by node: what each turn will write and send.
type Pending = BTreeMap<usize, VecDeque<Turn>>;

/// A cluster of many groups.
pub struct GroupsWorld {
    config: GroupsConfig,
    base: Instant,
    now: u64,
    seq: u64,
    rng: Rng,
    hosts: Vec<Host>,
    queue: BinaryHeap<Reverse<Event<Kind>>>,
    pending: Pending,
    blocked: BTreeSet<(usize, usize)>,
    /// Chance that one wire message is lost.
    pub loss: f64,
    min_delay: Duration,
    max_delay: Duration,
    /// One checker per group that ever existed.
    checkers: BTreeMap<String, Checker>,
    /// Every wire message sent and how many election messages they carried.
    pub wire_messages: u64,
    pub election_messages: u64,
}

const MAX_EVENTS_PER_INSTANT: u32 = 10_000;

impl GroupsWorld {
    /// `ids[k]` with priority `priorities[k]`; every node starts in every group of `groups`.
    pub fn new(config: GroupsConfig, nodes: &[(String, u32)], groups: &[String]) -> GroupsWorld {
        #[allow(clippy::disallowed_methods)]
        let base = Instant::now();
        let mut rng = Rng::new(config.seed ^ 0x6A0F_5EED_0000_0001);
        let r = config.timings.max_drift;
        let hosts = nodes
            .iter()
            .map(|(id, priority)| Host {
                id: id.clone(),
                priority: *priority,
                rate: 1.0 + (rng.unit() * 2.0 - 1.0) * r,
                up: false,
                incarnation: 0,
                groups: groups.iter().cloned().collect(),
                book: BTreeMap::new(),
                elections: BTreeMap::new(),
                inbox: VecDeque::new(),
                flushing: false,
                wake_gen: 0,
            })
            .collect();
        // One vote round and one ack round fit in a lease on the slowest clock.
        let max_delay = config
            .timings
            .lease
            .mul_f64((1.0 - r) / 5.0)
            .min(Duration::from_millis(20));
        let mut w = GroupsWorld {
            config,
            base,
            now: 0,
            seq: 0,
            rng,
            hosts,
            queue: BinaryHeap::new(),
            pending: BTreeMap::new(),
            blocked: BTreeSet::new(),
            loss: 0.0,
            min_delay: Duration::from_millis(1),
            max_delay,
            checkers: BTreeMap::new(),
            wire_messages: 0,
            election_messages: 0,
        };
        for i in 0..w.hosts.len() {
            w.start(i);
        }
        w
    }

    pub fn size(&self) -> usize {
        self.hosts.len()
    }

    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now)
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.hosts[i].up
    }

    pub fn id(&self, i: usize) -> &str {
        &self.hosts[i].id
    }

    /// The groups node `i` takes part in (also while it is down).
    pub fn groups_of(&self, i: usize) -> &BTreeSet<String> {
        &self.hosts[i].groups
    }

    /// Every group some node takes part in.
    pub fn all_groups(&self) -> BTreeSet<String> {
        self.hosts
            .iter()
            .flat_map(|h| h.groups.iter().cloned())
            .collect()
    }

    /// Every group some node runs an election of now (a removed one still resigning included).
    fn running_groups(&self) -> BTreeSet<String> {
        self.hosts
            .iter()
            .flat_map(|h| h.elections.keys().cloned())
            .collect()
    }

    /// Every violation of every group's invariants, in the order of time.
    pub fn violations(&self) -> Vec<(String, Violation)> {
        let mut all: Vec<(String, Violation)> = self
            .checkers
            .iter()
            .flat_map(|(g, c)| c.violations.iter().map(move |v| (g.clone(), v.clone())))
            .collect();
        all.sort_by_key(|(_, v)| v.at);
        all
    }

    fn local(&self, i: usize, t: u64) -> Instant {
        self.base + Duration::from_nanos((t as f64 * self.hosts[i].rate) as u64)
    }

    fn true_time(&self, i: usize, at: Instant) -> u64 {
        let local = at.saturating_duration_since(self.base).as_nanos() as u64;
        let mut t = (local as f64 / self.hosts[i].rate).ceil() as u64;
        while self.local(i, t) < at {
            t += 1;
        }
        t
    }

    fn push(&mut self, at: u64, kind: Kind) {
        self.seq += 1;
        self.queue.push(Reverse(Event {
            at,
            seq: self.seq,
            kind,
        }));
    }

    fn checker(&mut self, group: &str) -> &mut Checker {
        let n = self.hosts.len();
        self.checkers
            .entry(group.to_string())
            .or_insert_with(|| Checker::new(n))
    }

    /// The state group `g` of node `i` starts from: its entry in the book (or, broken, another
    /// group's).
    fn stored(&self, i: usize, g: &str) -> Persistent {
        let book = &self.hosts[i].book;
        if self.config.mix == Mix::CrossedBook {
            let next = book
                .range::<str, _>((std::ops::Bound::Excluded(g), std::ops::Bound::Unbounded))
                .next()
                .or_else(|| book.iter().next());
            return next.map(|(_, p)| p.clone()).unwrap_or_default();
        }
        book.get(g).cloned().unwrap_or_default()
    }

    fn election_config(&self, i: usize, g: &str) -> Config {
        let h = &self.hosts[i];
        let ids: Vec<String> = self.hosts.iter().map(|h| h.id.clone()).collect();
        Config {
            node_id: h.id.clone(),
            group: g.to_string(),
            members: MemberSet::new(&h.id, ids).expect("simulated member sets are valid"),
            priority: h.priority,
            eligible: true,
            healthy: true,
            timings: self.config.timings,
            // One epoch per node for all its groups, as the service's runtime gives them.
            beat: Some(self.base + beat_offset(self.config.seed, i)),
        }
    }

    /// Starts group `g`'s election on node `i` from its state in the book.
    fn open(&mut self, i: usize, g: &str) {
        let config = self.election_config(i, g);
        let persisted = self.stored(i, g);
        let now = self.local(i, self.now);
        let seed = self.rng.next_u64();
        let seq = self.hosts[i].incarnation << 32;
        let node = Node::new(config.clone(), persisted, now, seed, seq);
        let api = node.view(now);
        self.hosts[i].elections.insert(
            g.to_string(),
            Election {
                node,
                config,
                api,
                removing: false,
            },
        );
    }

    fn start(&mut self, i: usize) {
        self.hosts[i].incarnation += 1;
        self.hosts[i].up = true;
        self.hosts[i].flushing = false;
        self.hosts[i].inbox.clear();
        self.pending.remove(&i);
        let groups: Vec<String> = self.hosts[i].groups.iter().cloned().collect();
        for g in &groups {
            self.open(i, g);
        }
        self.turn(i, HostInput::Started(groups));
    }

    /// kill -9: every election and every turn not yet on disk is lost; the book is kept.
    pub fn crash(&mut self, i: usize) {
        let h = &mut self.hosts[i];
        h.up = false;
        h.elections.clear();
        h.inbox.clear();
        h.flushing = false;
        h.wake_gen += 1;
        self.pending.remove(&i);
        self.after_event();
    }

    pub fn restart(&mut self, i: usize) {
        if !self.hosts[i].up {
            self.start(i);
            self.after_event();
        }
    }

    /// An operator adds group `g` on node `i` (kept on disk; a group it had before comes back
    /// with its term and vote).
    pub fn add_group(&mut self, i: usize, g: &str) {
        if !self.hosts[i].groups.insert(g.to_string()) {
            return;
        }
        if self.hosts[i].up {
            self.open(i, g);
            self.enqueue(i, HostInput::Started(vec![g.to_string()]));
        }
        self.after_event();
    }

    /// An operator removes group `g` from node `i`: a leader resigns first, and the election
    /// goes once that has left.
    pub fn remove_group(&mut self, i: usize, g: &str) {
        if !self.hosts[i].groups.remove(g) {
            return;
        }
        if self.config.mix == Mix::ForgetOnRemove {
            self.hosts[i].book.remove(g);
        }
        let now = self.local(i, self.now);
        let Some(e) = self.hosts[i].elections.get_mut(g) else {
            return;
        };
        if e.node.view(now).is_leader_at(now) {
            e.removing = true;
            let input = Input::StepDown {
                successor: None,
                expected_term: None,
            };
            self.enqueue(i, HostInput::Command(g.to_string(), Box::new(input)));
        } else {
            self.hosts[i].elections.remove(g);
        }
        self.after_event();
    }

    /// An operator asks node `i` to step down in group `g`.
    pub fn step_down(&mut self, i: usize, g: &str) {
        if self.hosts[i].elections.contains_key(g) {
            let input = Input::StepDown {
                successor: None,
                expected_term: None,
            };
            self.enqueue(i, HostInput::Command(g.to_string(), Box::new(input)));
            self.after_event();
        }
    }

    /// Drops everything `from` sends to `to` (one-way).
    pub fn block(&mut self, from: usize, to: usize) {
        self.blocked.insert((from, to));
    }

    /// No message crosses between `side` and the rest.
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

    /// Node `i` answers as leader of `g` now (from its API's view, on its own clock).
    pub fn claims(&self, i: usize, g: &str) -> bool {
        let now = self.local(i, self.now);
        self.hosts[i].up
            && self.hosts[i]
                .elections
                .get(g)
                .is_some_and(|e| e.api.is_leader_at(now))
    }

    /// The leader of `g` that every running node in `g` names in one term, if it answers as
    /// leader.
    pub fn agreed_leader(&self, g: &str) -> Option<(usize, u64)> {
        let mut agreed: Option<(String, u64)> = None;
        for h in &self.hosts {
            let Some(e) = h.elections.get(g).filter(|_| h.up) else {
                continue;
            };
            let l = e.api.leader.clone()?;
            match &agreed {
                None => agreed = Some((l, e.api.term)),
                Some((a, t)) if *a == l && *t == e.api.term => {}
                Some(_) => return None,
            }
        }
        let (leader, term) = agreed?;
        let i = self.hosts.iter().position(|h| h.id == leader)?;
        self.claims(i, g).then_some((i, term))
    }

    /// Hands an input to node `i`'s loop: now if it is free, else after what it is doing.
    fn enqueue(&mut self, i: usize, input: HostInput) {
        if !self.hosts[i].up {
            return;
        }
        if self.hosts[i].flushing {
            self.hosts[i].inbox.push_back(input);
        } else {
            self.turn(i, input);
        }
    }

    /// One turn of node `i`'s loop.
    fn turn(&mut self, i: usize, input: HostInput) {
        let now = self.local(i, self.now);
        let now_ns = self.now;
        let mut touched: Vec<(String, Input)> = Vec::new();
        match input {
            // As a node without a cluster key reads it: a batch parsed in one pass.
            HostInput::Wire(bytes) => match Batch::parse(&bytes) {
                Ok(Some(b)) => {
                    for m in b.flatten() {
                        touched.push((m.group.clone(), Input::Message(m)));
                    }
                }
                Ok(None) => {
                    if let Ok(m) = Message::parse(&bytes) {
                        touched.push((m.group.clone(), Input::Message(m)));
                    }
                }
                Err(_) => {}
            },
            HostInput::Tick => {
                for (g, e) in &self.hosts[i].elections {
                    if e.node.poll_timeout().is_some_and(|t| t <= now) {
                        touched.push((g.clone(), Input::Tick));
                    }
                }
            }
            HostInput::Started(groups) => {
                touched.extend(groups.into_iter().map(|g| (g, Input::Tick)))
            }
            HostInput::Command(g, input) => touched.push((g, *input)),
        }
        let mut turn = Turn::default();
        for (g, input) in touched {
            // A message of a group this node does not take part in is dropped unread.
            let Some(e) = self.hosts[i].elections.get_mut(&g) else {
                continue;
            };
            let _ = e.node.handle(now, input);
            let view = e.node.view(now);
            e.api = view.clone();
            while let Some(a) = e.node.poll_action() {
                match a {
                    Action::Persist(p) => {
                        if self.config.mix == Mix::OneGroupPerFsync {
                            turn.book.clear();
                        }
                        turn.book.insert(g.clone(), p);
                    }
                    Action::Publish(m) => turn.messages.push((g.clone(), m)),
                    Action::Transition(_) | Action::Release { .. } => {}
                }
            }
            let config = e.config.clone();
            let disk = self.hosts[i].book.get(&g).cloned().unwrap_or_default();
            self.checker(&g).on_view(now_ns, i, &config, &disk, &view);
        }
        if turn.book.is_empty() && turn.messages.is_empty() {
            self.drop_removed(i);
            self.schedule_wake(i);
            return;
        }
        if self.config.mix == Mix::SendBeforeFsync {
            let messages = std::mem::take(&mut turn.messages);
            self.send(i, messages);
        }
        let d = self.rng.below(self.config.fsync_max.as_nanos() as u64 + 1);
        self.hosts[i].flushing = true;
        self.pending.entry(i).or_default().push_back(turn);
        let incarnation = self.hosts[i].incarnation;
        self.push(
            self.now + d,
            Kind::Flushed {
                node: i,
                incarnation,
            },
        );
    }

    /// The turn's write is done: its state is on disk, then its messages leave.
    fn flushed(&mut self, i: usize) {
        let Some(turn) = self.pending.get_mut(&i).and_then(|q| q.pop_front()) else {
            return;
        };
        let now_ns = self.now;
        for (g, p) in turn.book {
            let old = self.hosts[i].book.get(&g).cloned().unwrap_or_default();
            self.checker(&g).on_persist(now_ns, i, &old, &p);
            self.hosts[i].book.insert(g, p);
        }
        self.send(i, turn.messages);
        self.hosts[i].flushing = false;
        self.drop_removed(i);
        while !self.hosts[i].flushing {
            let Some(next) = self.hosts[i].inbox.pop_front() else {
                break;
            };
            self.turn(i, next);
        }
        if !self.hosts[i].flushing {
            self.schedule_wake(i);
        }
    }

    /// Removed groups whose resign has left.
    fn drop_removed(&mut self, i: usize) {
        self.hosts[i].elections.retain(|_, e| !e.removing);
    }

    /// Sends a turn's messages to every peer: one wire message each (a batch), split at the
    /// transport's limit.
    fn send(&mut self, i: usize, messages: Vec<(String, Message)>) {
        if messages.is_empty() {
            return;
        }
        let now = self.local(i, self.now);
        let now_ns = self.now;
        let mut wire: Vec<Arc<[u8]>> = Vec::new();
        for (g, m) in &messages {
            let answers = self.hosts[i]
                .elections
                .get(g)
                .is_some_and(|e| e.api.is_leader_at(now));
            let disk = self.hosts[i].book.get(g).cloned().unwrap_or_default();
            self.checker(g).on_send(now_ns, i, &disk, answers, m);
            let bytes = serde_json::to_vec(m).expect("a message serializes");
            wire.push(bytes.into());
        }
        self.election_messages += messages.len() as u64;
        let packed = batch::pack(&self.hosts[i].id, &wire, self.config.batch_max);
        for bytes in packed {
            let bytes: Arc<[u8]> = bytes.into();
            self.wire_messages += 1;
            for j in 0..self.size() {
                if j == i || self.blocked.contains(&(i, j)) || self.rng.chance(self.loss) {
                    continue;
                }
                let spread = (self.max_delay - self.min_delay).as_nanos() as u64;
                let d = self.min_delay.as_nanos() as u64 + self.rng.below(spread + 1);
                self.push(
                    self.now + d,
                    Kind::Deliver {
                        to: j,
                        bytes: bytes.clone(),
                    },
                );
            }
        }
    }

    fn schedule_wake(&mut self, i: usize) {
        let next = self.hosts[i]
            .elections
            .values()
            .filter_map(|e| e.node.poll_timeout())
            .min();
        self.hosts[i].wake_gen += 1;
        if let Some(at) = next {
            let t = self.true_time(i, at).max(self.now + 1);
            let gen = self.hosts[i].wake_gen;
            self.push(t, Kind::Wake { node: i, gen });
        }
    }

    /// Runs every event up to `until` (true time since the start).
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
                    let now = self.now;
                    self.checker("*")
                        .violate(now, "event storm: a node keeps waking at one instant");
                    return;
                }
            } else {
                same_instant = 0;
            }
            self.now = ev.at;
            match ev.kind {
                Kind::Deliver { to, bytes } => {
                    if self.hosts[to].up {
                        self.enqueue(to, HostInput::Wire(bytes));
                    }
                }
                Kind::Wake { node, gen } => {
                    let h = &self.hosts[node];
                    if h.up && h.wake_gen == gen && !h.flushing {
                        self.turn(node, HostInput::Tick);
                    }
                }
                Kind::Flushed { node, incarnation } => {
                    if self.hosts[node].up && self.hosts[node].incarnation == incarnation {
                        self.flushed(node);
                    }
                }
            }
            self.after_event();
        }
        self.now = self.now.max(until);
    }

    /// Per group: never two nodes answering as leader at once, and a leader's quorum bound.
    fn after_event(&mut self) {
        for g in self.running_groups() {
            let claimants: Vec<usize> = (0..self.size()).filter(|&i| self.claims(i, &g)).collect();
            let ids: Vec<String> = claimants
                .iter()
                .map(|&i| self.hosts[i].id.clone())
                .collect();
            let now = self.now;
            self.checker(&g).on_claims(now, &ids);
            for l in claimants {
                self.check_bound_quorum(l, &g);
            }
        }
    }

    /// Rules 5, 6 and 8 in group `g` (as `World` checks them for one group): while `l` answers
    /// as leader, a quorum of members refuses to vote for anyone else: `l` itself, a member
    /// that is down, that cannot vote yet, that promised `l`, or that does not run `g` (it
    /// votes in no election of `g` until it is added, and then starts with its guard).
    fn check_bound_quorum(&mut self, l: usize, g: &str) {
        let leader = self.hosts[l].id.clone();
        let mut free = Vec::new();
        let mut bound = 0;
        for j in 0..self.size() {
            let h = &self.hosts[j];
            let e = h.elections.get(g).filter(|_| h.up && j != l);
            let Some(e) = e else {
                bound += 1;
                continue;
            };
            let v = e.node.view(self.local(j, self.now));
            if !v.can_vote || v.promise.as_ref().is_some_and(|(p, _)| *p == leader) {
                bound += 1;
            } else {
                free.push(h.id.clone());
            }
        }
        let quorum = self.size() / 2 + 1;
        if bound < quorum {
            let what = format!(
                "{leader} answers as leader of {g} while only {bound} members refuse other votes (quorum {quorum}; free: {free:?})"
            );
            let now = self.now;
            self.checker(g).violate(now, what);
        }
    }

    /// One line per node: up or down, and per group its role, term and leader.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for h in &self.hosts {
            if !h.up {
                let _ = write!(s, "[{} down {:?}] ", h.id, h.groups);
                continue;
            }
            let _ = write!(s, "[{}", h.id);
            for (g, e) in &h.elections {
                let _ = write!(
                    s,
                    " {g}:{:?}/t{}/{:?}",
                    e.api.role, e.api.term, e.api.leader
                );
            }
            let _ = write!(s, "] ");
        }
        s
    }
}

/// What one seed of the multi-group simulation found.
#[derive(Debug)]
pub struct GroupsReport {
    pub seed: u64,
    pub summary: String,
    pub violations: Vec<(String, Violation)>,
    /// How long after the faults healed every group had a leader all its nodes name.
    pub elected_after_heal: Option<Duration>,
    pub trace: String,
    /// Wire messages sent and the election messages they carried.
    pub wire_messages: u64,
    pub election_messages: u64,
}

impl GroupsReport {
    pub fn replay_command(&self) -> String {
        format!(
            "SIM_GROUPS_SEED={} cargo test --release -p pilot-election-sim --test groups replay -- --nocapture",
            self.seed
        )
    }
}

/// Fast timings, within rule 7 at 5 % drift: `T = 600 ms ≥ L(1+r)/(1−r) + h ≈ 542 ms`.
fn fast_timings() -> Timings {
    Timings {
        heartbeat: Duration::from_millis(100),
        lease: Duration::from_millis(400),
        election_timeout: Duration::from_millis(600),
        stagger: Duration::from_millis(50),
        preempt_after: Duration::from_secs(1),
        max_drift: 0.05,
    }
}

/// Runs one seed with the multiplexing as the runtime does it.
pub fn run_groups_seed(seed: u64) -> GroupsReport {
    run_groups(seed, Mix::None)
}

/// Runs one seed: a few groups on 3 or 5 nodes, then faults for a while (crashes and restarts,
/// partitions, one-way links, loss, groups added, removed and added back one node at a time,
/// step-downs), then everything heals and every group must elect.
pub fn run_groups(seed: u64, mix: Mix) -> GroupsReport {
    let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x0006_4011_95EE);
    let size = [3, 3, 5][rng.below(3) as usize];
    let timings = if rng.chance(0.7) {
        fast_timings()
    } else {
        Timings::default()
    };
    let nodes: Vec<(String, u32)> = (0..size)
        .map(|k| {
            let priority = if rng.chance(0.5) {
                7
            } else {
                rng.below(100) as u32
            };
            (format!("n{k}"), priority)
        })
        .collect();
    let first_groups = 1 + rng.below(6) as usize;
    let groups: Vec<String> = (0..first_groups).map(|k| format!("g{k}")).collect();
    let config = GroupsConfig {
        seed,
        size,
        timings,
        fsync_max: Duration::from_micros(rng.below(5_000)),
        batch_max: [600, 4096, 64 * 1024][rng.below(3) as usize],
        mix,
    };
    let summary = format!(
        "{size} nodes, {first_groups} groups at start, T {:?}, fsync up to {:?}, wire messages up to {} B, {mix:?}",
        timings.election_timeout, config.fsync_max, config.batch_max
    );
    let mut w = GroupsWorld::new(config, &nodes, &groups);
    let mut trace = String::new();
    let log = |w: &GroupsWorld, trace: &mut String, what: String| {
        let _ = writeln!(
            trace,
            "{:>8.3}s {what} | {}",
            w.now().as_secs_f64(),
            w.describe()
        );
    };
    let t = timings.election_timeout;
    let faults_for = t * 40;
    // Faults to undo later: (true time, what).
    let mut later: Vec<(Duration, Undo)> = Vec::new();
    let mut next_group = first_groups;
    let mut removed: Vec<String> = Vec::new();
    // What the operator last set out to do with each group: `true` add it, `false` remove it.
    let mut intent: BTreeMap<String, bool> = groups.iter().map(|g| (g.clone(), true)).collect();
    w.run_until(t * 4);
    while w.now() < faults_for {
        let step = t.mul_f64(0.3 + rng.unit() * 3.0);
        let until = w.now() + step;
        // Undo what is due first, in order.
        later.sort_by_key(|(at, _)| *at);
        while let Some((at, _)) = later.first() {
            if *at > until {
                break;
            }
            let (at, undo) = later.remove(0);
            w.run_until(at);
            undo.apply(&mut w);
            log(&w, &mut trace, format!("{undo:?}"));
        }
        w.run_until(until);
        let n = w.size();
        let what = match rng.below(10) {
            0 | 1 => {
                let i = rng.below(n as u64) as usize;
                if !w.is_up(i) || (0..n).filter(|&j| !w.is_up(j)).count() + 1 > n / 2 {
                    continue;
                }
                w.crash(i);
                later.push((
                    w.now() + t.mul_f64(0.2 + rng.unit() * 6.0),
                    Undo::Restart(i),
                ));
                format!("crash n{i}")
            }
            2 => {
                let i = rng.below(n as u64) as usize;
                let side: Vec<usize> = (0..n).filter(|&j| j == i || rng.chance(0.3)).collect();
                w.partition(&side);
                later.push((w.now() + t.mul_f64(0.5 + rng.unit() * 5.0), Undo::Heal));
                format!("partition {side:?} from the rest")
            }
            3 => {
                let a = rng.below(n as u64) as usize;
                let b = (a + 1 + rng.below(n as u64 - 1) as usize) % n;
                w.block(a, b);
                later.push((w.now() + t.mul_f64(0.5 + rng.unit() * 5.0), Undo::Heal));
                format!("block n{a} -> n{b}")
            }
            4 => {
                w.loss = [0.0, 0.02, 0.1, 0.3][rng.below(4) as usize];
                format!("loss {}", w.loss)
            }
            5 | 6 => {
                // A group added (or added back), one node at a time.
                let g = if !removed.is_empty() && rng.chance(0.5) {
                    removed.remove(rng.below(removed.len() as u64) as usize)
                } else {
                    next_group += 1;
                    format!("g{}", next_group - 1)
                };
                let mut at = w.now();
                for i in order(n, &mut rng) {
                    at += t.mul_f64(rng.unit() * 2.0);
                    later.push((at, Undo::Add(i, g.clone())));
                }
                intent.insert(g.clone(), true);
                format!("adding {g}")
            }
            7 => {
                // A group removed, one node at a time.
                let all: Vec<String> = w.all_groups().into_iter().collect();
                if all.len() <= 1 {
                    continue;
                }
                let g = all[rng.below(all.len() as u64) as usize].clone();
                let mut at = w.now();
                for i in order(n, &mut rng) {
                    at += t.mul_f64(rng.unit() * 2.0);
                    later.push((at, Undo::Remove(i, g.clone())));
                }
                removed.push(g.clone());
                intent.insert(g.clone(), false);
                format!("removing {g}")
            }
            _ => {
                let all: Vec<String> = w.all_groups().into_iter().collect();
                let Some(g) = all.get(rng.below(all.len().max(1) as u64) as usize) else {
                    continue;
                };
                let g = g.clone();
                let Some((l, _)) = w.agreed_leader(&g) else {
                    continue;
                };
                w.step_down(l, &g);
                format!("step down n{l} in {g}")
            }
        };
        log(&w, &mut trace, what);
    }
    // Heal: every undo now, then every node up, no loss, no blocked link.
    later.sort_by_key(|(at, _)| *at);
    for (_, undo) in later.drain(..) {
        undo.apply(&mut w);
    }
    w.heal();
    w.loss = 0.0;
    for i in 0..w.size() {
        w.restart(i);
    }
    // An addition and a removal of one group that overlapped leave it on some nodes only: the
    // operator finishes the one it started last.
    for (g, add) in &intent {
        for i in 0..w.size() {
            if *add {
                w.add_group(i, g);
            } else {
                w.remove_group(i, g);
            }
        }
    }
    log(&w, &mut trace, "healed".into());
    let healed = w.now();
    let mut elected_after_heal = None;
    let bound = t * 30;
    while w.now() < healed + bound {
        w.run_until(w.now() + Duration::from_millis(20));
        let groups = w.all_groups();
        if groups.iter().all(|g| w.agreed_leader(g).is_some()) {
            elected_after_heal = Some(w.now() - healed);
            break;
        }
    }
    log(&w, &mut trace, "end".into());
    let mut violations = w.violations();
    if elected_after_heal.is_none() {
        let leaderless: Vec<String> = w
            .all_groups()
            .into_iter()
            .filter(|g| w.agreed_leader(g).is_none())
            .collect();
        violations.push((
            leaderless.join(","),
            Violation {
                at: w.now(),
                what: format!("no agreed leader {bound:?} after the faults healed: {leaderless:?}"),
            },
        ));
    }
    GroupsReport {
        seed,
        summary,
        violations,
        elected_after_heal,
        trace,
        wire_messages: w.wire_messages,
        election_messages: w.election_messages,
    }
}

/// A fault's end, or a step of an operator's change that lands later.
#[derive(Debug)]
enum Undo {
    Restart(usize),
    Heal,
    Add(usize, String),
    Remove(usize, String),
}

impl Undo {
    fn apply(&self, w: &mut GroupsWorld) {
        match self {
            Undo::Restart(i) => w.restart(*i),
            Undo::Heal => w.heal(),
            Undo::Add(i, g) => w.add_group(*i, g),
            Undo::Remove(i, g) => w.remove_group(*i, g),
        }
    }
}

/// `0..n` in an order drawn from `rng`.
fn order(n: usize, rng: &mut Rng) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for k in (1..n).rev() {
        v.swap(k, rng.below(k as u64 + 1) as usize);
    }
    v
}
