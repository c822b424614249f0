//! The tokio task that drives the election core: it is the only place where time, the network
//! and the disk meet the state machine.
//!
//! One step ([`Runtime::step`]) is: feed one input to the core, publish the core's new view as
//! the [`Snapshot`] everything answering for the node reads, then execute the step's actions in
//! order, a `Persist` durable before any later `Publish` leaves (docs/protocol.md, rule 3 and
//! rule 9). Publishing the view first is what keeps two nodes from answering "leader" at once
//! during a handover: a leader's revoked lease is visible before its `resign` can release anyone,
//! however long the loop then stalls. Readers never lock the loop: the snapshot goes through a
//! `watch` channel.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::clock::wall::{rfc3339, unix_ms_now};
use crate::directory::Directory;
use crate::election::stop::{self, Exit};
use crate::election::{
    Action, Body, CommandError, Input, Maintenance, Member, MemberSet, Message, Node, NodeInfo,
    Outcome, Role, Timings, Transition, View,
};
use crate::log_limit::KeyedLogLimit;
use crate::metrics::{ElectionResult, MessageType, Metrics, Received};
use crate::observer_table::Observers;
use crate::signing::{KeyRing, Rejection, ReplayGuard};
use crate::store::{HistoryEntry, Store, StoreError, HISTORY_LIMIT};
use crate::transport::{Health, Transport};

mod change;
mod labels;
mod maintenance;
pub use change::{reason as change_reason, Change, ChangeRole, Reporter};
pub use maintenance::MaintenanceRequest;

use crate::exit_budget::{FLUSH as FLUSH_GRACE, HANDOVER as SHUTDOWN_GRACE};

/// At most one line per stray sender and reason in this long.
const STRAY_LOG_EVERY: Duration = Duration::from_secs(60);
/// Distinct stray senders named per [`STRAY_LOG_EVERY`]; a real misconfiguration involves a
/// handful.
const STRAY_SENDERS_NAMED: usize = 32;

/// An operator command from the API, answered once its actions have been carried out.
#[derive(Debug)]
pub struct Command {
    pub input: Input,
    pub reply: oneshot::Sender<Result<Outcome, CommandError>>,
}

/// Everything the API reads, as of the loop's last step.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub view: View,
    /// Every other member as this node knows it.
    pub members: Vec<Member>,
    /// The configured member set (this node included).
    pub member_set: MemberSet,
    pub transport: Health,
    pub history: Arc<VecDeque<HistoryEntry>>,
    pub timings: Timings,
    /// What this node announces to clients (`None`: nothing).
    pub info: Option<NodeInfo>,
    /// What the other members announced.
    pub directory: Arc<Directory>,
    /// The newest maintenance write this node has seen (rule 16); whether it is in force now
    /// is `view.maintenance`.
    pub maintenance: Option<Maintenance>,
}

impl Snapshot {
    /// What `id` (this node or another member) announced to clients.
    pub fn info_of(&self, id: &str) -> Option<&NodeInfo> {
        if id == self.view.node_id {
            self.info.as_ref()
        } else {
            self.directory.get(id)
        }
    }
}

/// The instant of the election loop's last turn, readable without waiting for a snapshot:
/// `/healthz` fails once it is older than the lease.
pub type LastTurn = Arc<Mutex<Instant>>;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct Runtime {
    node: Node,
    store: Store,
    transport: Arc<dyn Transport>,
    inbound: mpsc::Receiver<Vec<u8>>,
    commands: mpsc::Receiver<Command>,
    snapshot: watch::Sender<Snapshot>,
    last_turn: LastTurn,
    /// systemd's watchdog, petted from this loop so that a stuck loop stops petting.
    watchdog: crate::notify::Watchdog,
    metrics: Arc<Metrics>,
    history: Arc<VecDeque<HistoryEntry>>,
    leaderless_since: Option<Instant>,
    role: Role,
    /// With a cluster key: sign what leaves, verify and de-replay what arrives.
    keys: Option<KeyRing>,
    replay: ReplayGuard,
    /// The latest history for its writer task (see [`file_writer`]).
    history_out: watch::Sender<Vec<HistoryEntry>>,
    /// The replay marks for their writer task (see [`file_writer`]).
    replay_out: watch::Sender<BTreeMap<String, u64>>,
    /// Names a non-member (or a member with another member set) at once, without a flood:
    /// each (sender, reason) once per [`STRAY_LOG_EVERY`], at most [`STRAY_SENDERS_NAMED`]
    /// senders in that time; the rest are counted in the next line written (the metrics count
    /// every message).
    stray_log: KeyedLogLimit<(String, &'static str)>,
    /// Every one is awaited (all at once) before a resign leaves.
    release_guards: Vec<ReleaseGuard>,
    /// Changes of leader and role for `--on-change`, if anyone asked for them.
    changes: Option<Reporter>,
    group: String,
    /// Stamped on every message that leaves (see [`crate::directory`]).
    info: Option<NodeInfo>,
    directory: Arc<Directory>,
    maintenance_requests: mpsc::Receiver<MaintenanceRequest>,
    /// The newest maintenance write seen, sent on every message (rule 16).
    maintenance: Option<Maintenance>,
    /// What the core was last told of it.
    maintenance_in_core: bool,
    /// The observers heard on the topic (their announcements never reach the core).
    observers: Observers,
}

/// Awaited before a resign leaves this node, with the term it gives up. A resign lets the other
/// members elect within milliseconds instead of after `T`, so whatever acts for the leader
/// outside this process (the `--exec` child, the `--on-change` hook that takes a VIP away) must
/// be done before it is sent; the view that revokes leadership is already published, and the
/// [`Change`] that reports it already sent, when this runs (rule 9).
pub type ReleaseGuard = Arc<dyn Fn(u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The channels a runtime is built from.
pub struct Wiring {
    pub transport: Arc<dyn Transport>,
    /// The cluster key ring; `None` accepts unsigned messages (peers unauthenticated).
    pub keys: Option<KeyRing>,
    pub inbound: mpsc::Receiver<Vec<u8>>,
    pub commands: mpsc::Receiver<Command>,
    pub metrics: Arc<Metrics>,
    /// The election group: only its members' announcements are recorded.
    pub group: String,
    /// What this node announces to clients (`--advertise-url`, `--meta`).
    pub info: Option<NodeInfo>,
    /// `POST /pause` and `DELETE /pause`.
    pub maintenance: mpsc::Receiver<MaintenanceRequest>,
    /// Where announcements of observers (`run --observe`) are recorded, for `/status`.
    pub observers: Observers,
}

impl Runtime {
    /// Returns the runtime, the snapshot receiver for the API and the loop clock.
    pub fn new(
        node: Node,
        store: Store,
        history: Vec<HistoryEntry>,
        wiring: Wiring,
    ) -> (Runtime, watch::Receiver<Snapshot>, LastTurn) {
        let now = clock::now();
        let last_turn = Arc::new(Mutex::new(now));
        let history: VecDeque<_> = history.into_iter().collect();
        let role = node.role();
        let directory = Arc::new(Directory::default());
        let maintenance = store.maintenance();
        let first = snapshot_of(
            &node,
            wiring.transport.health(),
            Arc::new(history.clone()),
            (&wiring.info, &directory, &maintenance),
            now,
        );
        let (tx, rx) = watch::channel(first);
        // Only signed messages are de-replayed (unsigned ones prove nothing about their sender).
        let replay = match &wiring.keys {
            Some(_) => ReplayGuard::from_marks(&store.replay_marks()),
            None => ReplayGuard::new(),
        };
        // Saved again as loaded, so a sender silent during this run keeps its mark.
        let marks = replay.marks();
        let rt = Runtime {
            node,
            store,
            transport: wiring.transport,
            inbound: wiring.inbound,
            commands: wiring.commands,
            snapshot: tx,
            last_turn: last_turn.clone(),
            watchdog: crate::notify::Watchdog::from_env(),
            metrics: wiring.metrics,
            history: Arc::new(history),
            leaderless_since: Some(now),
            role,
            history_out: watch::Sender::new(Vec::new()),
            replay,
            keys: wiring.keys,
            replay_out: watch::Sender::new(marks),
            stray_log: KeyedLogLimit::new(STRAY_LOG_EVERY, STRAY_SENDERS_NAMED),
            release_guards: Vec::new(),
            changes: None,
            group: wiring.group,
            info: wiring.info,
            directory,
            maintenance_requests: wiring.maintenance,
            maintenance,
            maintenance_in_core: false,
            observers: wiring.observers,
        };
        (rt, rx, last_turn)
    }

    /// Every resign this node sends waits for `guard` first (see [`ReleaseGuard`]), and for
    /// every guard given before it, all at once.
    pub fn guard_releases(&mut self, guard: ReleaseGuard) {
        self.release_guards.push(guard);
    }

    /// Reports every change of the known leader or of this node's role from now on, starting
    /// with a `start` change of the current view (see [`Change`]).
    pub fn report_changes(&mut self) -> watch::Receiver<Change> {
        let (reporter, rx) = Reporter::new(&self.node.view(clock::now()));
        self.changes = Some(reporter);
        rx
    }

    /// Runs until `stop` is cancelled and, if this node led, its successor is known (or the
    /// grace period ran out). An error means the state could not be made durable: the node must
    /// not go on.
    pub async fn run(mut self, stop: CancellationToken) -> Result<(), RuntimeError> {
        // Each file has one writer task, so that writes never race; the loop only hands them
        // the latest content.
        let flush_now = CancellationToken::new();
        let mut writers = vec![tokio::spawn(file_writer(
            "history",
            self.store.clone(),
            self.history_out.subscribe(),
            Duration::ZERO,
            flush_now.clone(),
            |store: &Store, list: &Vec<HistoryEntry>| store.save_history(list),
        ))];
        if self.keys.is_some() {
            // Marks change with every signed message: at most one save per heartbeat interval.
            writers.push(tokio::spawn(file_writer(
                "replay marks",
                self.store.clone(),
                self.replay_out.subscribe(),
                self.node.timings().heartbeat,
                flush_now.clone(),
                |store: &Store, marks: &BTreeMap<String, u64>| store.save_replay_marks(marks),
            )));
        }
        let result = self.drive(stop).await;
        // The last transitions (a shutdown's, typically) and marks must not be lost to the
        // exit: hand the writers the final content, close their channels, wait for them.
        let list: Vec<_> = self.history.iter().cloned().collect();
        self.history_out.send_replace(list);
        drop(std::mem::replace(
            &mut self.history_out,
            watch::Sender::new(Vec::new()),
        ));
        drop(std::mem::replace(
            &mut self.replay_out,
            watch::Sender::new(BTreeMap::new()),
        ));
        flush_now.cancel();
        let all = futures_util::future::join_all(writers);
        let sent = self.transport.flushed();
        if tokio::time::timeout(FLUSH_GRACE, futures_util::future::join(all, sent))
            .await
            .is_err()
        {
            tracing::warn!(
                "history, replay marks or the last messages not done within the grace period"
            );
        }
        result
    }

    async fn drive(&mut self, stop: CancellationToken) -> Result<(), RuntimeError> {
        let h = self.node.timings().heartbeat;
        let mut stopping: Option<(Instant, bool)> = None;
        self.publish_snapshot(clock::now());
        loop {
            // Before anything else: a restarted node holds the pause it kept on disk from its
            // first step, and a pause that reached its end lapses here.
            self.sync_maintenance().await?;
            let now = clock::now();
            *self.last_turn.lock().unwrap_or_else(|e| e.into_inner()) = now;
            self.watchdog.pet(now);
            if let Some((since, hand_over)) = stopping {
                let view = self.node.view(now);
                match stop::exit_now(hand_over, &view, now.saturating_duration_since(since)) {
                    None => {}
                    Some(Exit::NothingToWaitFor) => return Ok(()),
                    Some(Exit::HandedOver { successor }) => {
                        tracing::info!(
                            successor = %successor,
                            term = view.term,
                            handover_ms = (now - since).as_millis() as u64,
                            "handed leadership over; exiting"
                        );
                        return Ok(());
                    }
                    Some(Exit::GraceOver) => {
                        tracing::warn!(
                            grace_ms = SHUTDOWN_GRACE.as_millis() as u64,
                            "no successor known within the grace period; exiting"
                        );
                        return Ok(());
                    }
                }
            }
            let mut deadline = self.node.poll_timeout().unwrap_or(now + h);
            if let Some((since, _)) = stopping {
                deadline = deadline.min(since + SHUTDOWN_GRACE);
            }
            tokio::select! {
                _ = clock::sleep_until(deadline) => {
                    let _ = self.step(Input::Tick).await?;
                }
                Some(bytes) = self.inbound.recv() => self.on_bytes(&bytes).await?,
                Some(cmd) = self.commands.recv() => {
                    let result = self.step(cmd.input).await?;
                    let _ = cmd.reply.send(result);
                }
                Some(req) = self.maintenance_requests.recv() => {
                    self.on_maintenance_request(req).await?;
                }
                _ = stop.cancelled(), if stopping.is_none() => {
                    let now = clock::now();
                    let was_leader = self.node.view(now).is_leader_at(now);
                    // With no live candidate (a single node, or every peer silent or withdrawn)
                    // nobody can take over soon: waiting out the grace would only delay the exit.
                    let can_hand_over = self.node.has_successor(now);
                    tracing::info!(was_leader, can_hand_over, "shutting down");
                    let _ = self.step(Input::Shutdown).await?;
                    stopping = Some((now, was_leader && can_hand_over));
                }
            }
        }
    }

    /// One input through the core: the new view is published before any of its actions runs
    /// (rule 9), then the actions run in order, then the view is published again (transport
    /// health and history may have changed while they ran).
    async fn step(&mut self, input: Input) -> Result<Result<Outcome, CommandError>, RuntimeError> {
        let now = clock::now();
        let result = self.node.handle(now, input);
        self.publish_snapshot(now);
        self.on_role(now);
        self.execute().await?;
        if let Some(changes) = &self.changes {
            changes.role(&self.node.view(now));
        }
        self.publish_snapshot(clock::now());
        Ok(result)
    }

    async fn on_bytes(&mut self, bytes: &[u8]) -> Result<(), RuntimeError> {
        // Nothing forged, replayed or malformed reaches the core; each drop is counted by reason.
        // The replay guard sits below membership on purpose: it tracks what each holder of the
        // cluster key sent (a stray node with the key included), so that no recording of it can
        // be played back; the election state of rule 1 is the core's, which a non-member never
        // changes.
        let checked = match &self.keys {
            Some(keys) => keys
                .verify(bytes)
                .and_then(|m| self.replay.check(&m.from, m.seq).map(|_| m))
                .inspect(|m| self.record_mark(&m.from)),
            None => Message::parse(bytes).map_err(Rejection::from),
        };
        match checked {
            Ok(msg) if msg.observer => {
                // An observer's announcement: recorded, never a stray, never the core's. A
                // member's id in one is a misconfigured observer; it changes nothing either.
                if msg.group == self.group && !self.node.members().contains(&msg.from) {
                    self.observers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .heard(clock::now(), &msg.from);
                }
                self.metrics
                    .received((&msg.body).into(), Received::Observer);
            }
            Ok(msg) => {
                if msg.group == self.group && self.node.members().contains(&msg.from) {
                    Arc::make_mut(&mut self.directory).record(
                        &msg.from,
                        msg.seq,
                        msg.info.as_ref(),
                    );
                }
                // Before the message itself: a resign that arrives with the pause that came
                // first must find the core already holding its campaigns back.
                if let Some(write) = &msg.maintenance {
                    if msg.group == self.group && self.node.members().contains(&msg.from) {
                        self.on_maintenance_heard(write).await?;
                    }
                }
                let kind = MessageType::from(&msg.body);
                let (from, members) = (msg.from.clone(), msg.members.clone());
                let outcome = match self.step(Input::Message(msg)).await? {
                    Ok(o) => o,
                    Err(_) => Outcome::Ignored,
                };
                self.metrics.received(kind, (&outcome).into());
                self.log_stray(&from, &members, &outcome);
            }
            Err(e) => {
                tracing::debug!(error = %e, reason = e.reason(), "dropped a message");
                self.metrics.received(MessageType::Unknown, (&e).into());
            }
        }
        Ok(())
    }

    /// Names a sender that is not a member, or whose member set differs. An operator must see a
    /// stray node at once, by name; a flood of made-up sender ids must cost neither a log line
    /// nor memory each.
    fn log_stray(&mut self, from: &str, fingerprint: &str, outcome: &Outcome) {
        let why = match outcome {
            Outcome::NotMember => "not_member",
            Outcome::OtherMembers => "other_members",
            _ => return,
        };
        let Some(left_out) = self.stray_log.admit(clock::now(), (from.to_string(), why)) else {
            return;
        };
        if left_out > 0 {
            tracing::warn!(
                left_out,
                "messages of more stray senders than are named each minute were not logged (the metrics count them all)"
            );
        }
        let members = self.node.members();
        match outcome {
            Outcome::NotMember => tracing::warn!(
                sender = from,
                members = %members,
                "a node that is not a member sent election messages; ignored (add it with --member/--peer on every node, or stop it)"
            ),
            _ => tracing::warn!(
                sender = from,
                its_fingerprint = fingerprint,
                ours = members.fingerprint(),
                "a member has another member set; its votes and acks are not counted until every node lists the same members"
            ),
        }
    }

    /// Hands the writer the guard's new highest number for `from`. The copy is kept up to date
    /// entry by entry (a whole copy per message would cost one allocation per tracked sender),
    /// and rebuilt only when the guard has forgotten a sender to stay bounded.
    fn record_mark(&self, from: &str) {
        let replay = &self.replay;
        let Some(highest) = replay.highest(from) else {
            return;
        };
        self.replay_out.send_if_modified(|marks| {
            if marks.get(from) == Some(&highest) {
                return false;
            }
            marks.insert(from.to_string(), highest);
            if marks.len() > replay.len() {
                *marks = replay.marks();
            }
            true
        });
    }

    /// Carries out the core's actions in order.
    async fn execute(&mut self) -> Result<(), RuntimeError> {
        while let Some(action) = self.node.poll_action() {
            match action {
                Action::Persist(p) => {
                    let store = self.store.clone();
                    tokio::task::spawn_blocking(move || store.persist(&p))
                        .await
                        .expect("the persist task does not panic")?;
                }
                Action::Publish(mut msg) => {
                    if matches!(msg.body, Body::Resign { .. }) && !self.release_guards.is_empty() {
                        let all = self.release_guards.iter().map(|guard| guard(msg.term));
                        futures_util::future::join_all(all).await;
                    }
                    msg.stamp(unix_ms_now());
                    msg.info.clone_from(&self.info);
                    msg.maintenance.clone_from(&self.maintenance);
                    if let Some(keys) = &self.keys {
                        keys.sign(&mut msg);
                    }
                    let bytes: Arc<[u8]> = msg.to_json().into_bytes().into();
                    self.transport.publish(bytes);
                }
                Action::Transition(t) => self.on_transition(t),
            }
        }
        Ok(())
    }

    fn on_transition(&mut self, t: Transition) {
        let now = clock::now();
        if let Some(changes) = &self.changes {
            changes.transition(&t, &self.node.view(now));
        }
        let leaderless_ms = match (&t.leader, self.leaderless_since) {
            (Some(_), Some(since)) => Some((now - since).as_millis() as u64),
            _ => None,
        };
        match &t.leader {
            Some(_) => {
                if let Some(ms) = leaderless_ms {
                    self.metrics.leaderless_seconds.inc_by(ms as f64 / 1000.0);
                }
                self.leaderless_since = None;
            }
            None => self.leaderless_since = Some(now),
        }
        self.metrics.transition(t.reason.into());
        let reason = t.reason.as_str();
        tracing::info!(
            term = t.term,
            leader = t.leader.as_deref().unwrap_or(""),
            previous = t.previous.as_deref().unwrap_or(""),
            reason,
            leaderless_ms,
            "leader transition"
        );
        let entry = HistoryEntry {
            term: t.term,
            leader: t.leader,
            previous: t.previous,
            reason: reason.to_string(),
            at: rfc3339(unix_ms_now()),
            leaderless_ms,
        };
        let history = Arc::make_mut(&mut self.history);
        history.push_back(entry);
        while history.len() > HISTORY_LIMIT {
            history.pop_front();
        }
        self.history_out
            .send_replace(history.iter().cloned().collect());
    }

    /// Metrics and a log line when the role changed in the last step.
    fn on_role(&mut self, now: Instant) {
        let view: View = self.node.view(now);
        self.metrics.term.set(view.term as i64);
        match (self.role, view.role) {
            (Role::Follower, Role::PreCandidate | Role::Candidate) => {
                self.metrics.election(ElectionResult::Started)
            }
            (Role::PreCandidate | Role::Candidate, Role::Leader) => {
                self.metrics.election(ElectionResult::Won)
            }
            (Role::PreCandidate | Role::Candidate, Role::Follower) => {
                self.metrics.election(ElectionResult::Lost)
            }
            _ => {}
        }
        if self.role != view.role {
            tracing::info!(term = view.term, role = ?view.role, "role changed");
        }
        self.role = view.role;
    }

    fn publish_snapshot(&self, now: Instant) {
        let snap = snapshot_of(
            &self.node,
            self.transport.health(),
            self.history.clone(),
            (&self.info, &self.directory, &self.maintenance),
            now,
        );
        self.snapshot.send_replace(snap);
    }
}

/// Writes one file off the election loop, one write at a time and always the latest content,
/// so two quick changes can neither interleave their files nor land out of order. After each
/// write it waits `pace` (cut short by `flush_now` at exit) before the next, so a value that
/// changes with every message costs at most one fsync per `pace`. Both files are recoverable
/// (history is informational; see [`Store::replay_marks`] for the marks): a failed write only
/// logs. Ends once its channel closes and the last value is written.
async fn file_writer<T, F>(
    what: &'static str,
    store: Store,
    mut rx: watch::Receiver<T>,
    pace: Duration,
    flush_now: CancellationToken,
    save: F,
) where
    T: Clone + Send + Sync + 'static,
    F: Fn(&Store, &T) -> Result<(), StoreError> + Clone + Send + 'static,
{
    while rx.changed().await.is_ok() {
        let value = rx.borrow_and_update().clone();
        let (store, save) = (store.clone(), save.clone());
        let written = tokio::task::spawn_blocking(move || save(&store, &value)).await;
        if let Ok(Err(e)) = written {
            tracing::warn!(error = %e, "could not save {what}");
        }
        tokio::select! {
            _ = tokio::time::sleep(pace) => {}
            _ = flush_now.cancelled() => {}
        }
    }
}

fn snapshot_of(
    node: &Node,
    transport: Health,
    history: Arc<VecDeque<HistoryEntry>>,
    (info, directory, maintenance): (&Option<NodeInfo>, &Arc<Directory>, &Option<Maintenance>),
    now: Instant,
) -> Snapshot {
    Snapshot {
        view: node.view(now),
        members: node.peers(now),
        member_set: node.members().clone(),
        transport,
        history,
        timings: *node.timings(),
        info: info.clone(),
        directory: directory.clone(),
        maintenance: maintenance.clone(),
    }
}
