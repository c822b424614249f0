//! The tokio task that drives the election cores: it is the only place where time, the network
//! and the disk meet the state machines. It drives one [`Election`] per group this process
//! takes part in (`runtime/election.rs`), the way one endpoint drives many sans-IO
//! connections: one inbound queue, one wire out, each election woken at its own deadline.
//!
//! One step of an election (`Election::step`) is: feed one input to the core, publish the core's new view as
//! the [`Snapshot`] everything answering for the node reads, then execute the step's actions in
//! order, a `Persist` durable before any later `Publish` leaves (docs/protocol.md, rule 3 and
//! rule 9). Publishing the view first is what keeps two nodes from answering "leader" at once
//! during a handover: a leader's revoked lease is visible before its `resign` can release anyone,
//! however long the loop then stalls. Readers never lock the loop: each election's snapshot is an
//! `Arc` on a `watch` channel, which a reader takes out in one reference count.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{BoxStream, SelectAll};
use futures_util::StreamExt as _;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::clock::wall::{rfc3339, unix_ms_now};
use crate::directory::Directory;
use crate::election::firing::{Firing, FiringBook};
use crate::election::stop::{self, Exit};
use crate::election::{
    Action, Body, CommandError, Input, Maintenance, Member, MemberSet, Message, Node, NodeInfo,
    Outcome, Role, Timings, Transition, View,
};
use crate::inbound;
use crate::log_limit::KeyedLogLimit;
use crate::metrics::{ElectionResult, MessageType, Metrics, Received};
use crate::observer_table::Observers;
use crate::signing::{KeyRing, Rejection, ReplayGuard};
use crate::store::{HistoryEntry, Store, StoreError, HISTORY_LIMIT};
use crate::transport::events::Report;
use crate::transport::{Health, Transport};

mod change;
mod election;
mod firings;
mod labels;
mod maintenance;
mod observation;
mod outbox;
pub use change::{reason as change_reason, Change, ChangeRole, Reporter};
use election::{Election, Shared};
pub use election::{ElectionParts, Keeps};
pub use firings::{FiringRequest, FiringWrites};
pub use maintenance::MaintenanceRequest;
use observation::Observation;
pub use observation::{ObservationHandle, ObservationParts, Observing, ANNOUNCE_EVERY};
use outbox::{Outbox, Pacing};

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
    /// The configured member set (this node included); one allocation shared by every
    /// snapshot.
    pub member_set: Arc<MemberSet>,
    /// As of the loop's turn (one reading for every election of the turn).
    pub transport: Arc<Health>,
    pub history: Arc<VecDeque<HistoryEntry>>,
    pub timings: Timings,
    /// What this node announces to clients (`None`: nothing).
    pub info: Option<NodeInfo>,
    /// What the other members announced.
    pub directory: Arc<Directory>,
    /// The newest maintenance write this node has seen (rule 16); whether it is in force now
    /// is `view.maintenance`.
    pub maintenance: Option<Maintenance>,
    /// The members that hold it (this node first): `POST /pause` answers once a quorum does.
    pub maintenance_held_by: Vec<String>,
    /// The newest scheduled firing record this node knows of (rule 19).
    pub firing: Option<Firing>,
    /// The members that acknowledged it, or a later one, in the view's term (this node first,
    /// if it has it on disk): a leader runs a firing it claimed once a quorum does.
    pub firing_held_by: Vec<String>,
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

/// The loop that drives every election of this process: one task, one inbound queue, one
/// wire out. It verifies each message once, hands it to the election of its group, wakes each
/// election at its own deadline and routes each request to the election it names. Everything
/// of one election is in its [`Election`]; what is here is what they share.
pub struct Runtime {
    /// Every election this process takes part in, by group.
    elections: BTreeMap<String, Election>,
    /// Every election it follows without a vote (`run --observe`), by group.
    observations: BTreeMap<String, Observation>,
    /// What the members an observer follows over http report (its transport's).
    reports: Option<mpsc::Receiver<Report>>,
    /// The first group added: its senders' replay marks keep the keys a node of one election
    /// has always saved (see [`Runtime::replay_key`]).
    default_group: Option<String>,
    shared: Shared,
    /// One turn's messages and state, sent and kept at the end of the turn (rule 18).
    out: Outbox,
    /// The process's store: the replay marks (each election's state is in its own store);
    /// `None` for an observer, which keeps nothing.
    store: Option<Store>,
    inbound: mpsc::Receiver<Vec<u8>>,
    /// Every election's commands and maintenance requests, each tagged with its group.
    requests: SelectAll<BoxStream<'static, (Arc<str>, Request)>>,
    /// Elections added and removed while the node runs.
    group_changes: mpsc::Receiver<GroupChange>,
    /// The file writers (history, replay marks), awaited at exit.
    writers: Vec<JoinHandle<()>>,
    /// Cuts the writers' pacing short at exit.
    flush_now: CancellationToken,
    last_turn: LastTurn,
    /// systemd's watchdog, petted from this loop so that a stuck loop stops petting.
    watchdog: crate::notify::Watchdog,
    replay: ReplayGuard,
    /// The replay marks for their writer task (see [`file_writer`]).
    replay_out: watch::Sender<BTreeMap<String, u64>>,
    /// Names a non-member (or a member with another member set) at once, without a flood:
    /// each (sender, reason) once per [`STRAY_LOG_EVERY`], at most [`STRAY_SENDERS_NAMED`]
    /// senders in that time; the rest are counted in the next line written (the metrics count
    /// every message).
    stray_log: KeyedLogLimit<(String, &'static str)>,
}

/// What reaches one election from outside the loop. A command is boxed: it carries the whole
/// input, a maintenance request a few words, and both wait in the same stream.
enum Request {
    Command(Box<Command>),
    Maintenance(MaintenanceRequest),
    Firing(FiringRequest),
}

/// Awaited before a resign leaves this node, with the term it gives up. A resign lets the other
/// members elect within milliseconds instead of after `T`, so whatever acts for the leader
/// outside this process (the `--exec` child, the `--on-change` hook that takes a VIP away) must
/// be done before it is sent; the view that revokes leadership is already published, and the
/// [`Change`] that reports it already sent, when this runs (rule 9).
pub type ReleaseGuard = Arc<dyn Fn(u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A change of the elections of a running node (`POST /groups`, `DELETE /groups/{group}`).
pub enum GroupChange {
    /// Take part in `parts.group`'s election from now on (boxed: a whole core); with
    /// `report_changes`, its changes of leader and role are reported too (`--on-change`).
    Add {
        parts: Box<ElectionParts>,
        report_changes: bool,
        reply: oneshot::Sender<(ElectionHandle, Option<watch::Receiver<Change>>)>,
    },
    /// Every resign of `group`'s election waits for `guard` from now on (an added group's
    /// `--exec` child or `--on-change` run). A group just added cannot lead yet (its start-up
    /// guard), so the guard is in place before any resign of it.
    Guard {
        group: String,
        guard: ReleaseGuard,
        reply: oneshot::Sender<()>,
    },
    /// Leave `group`'s election: a leader resigns (naming a successor when it can, as at
    /// shutdown), then the election is dropped. Its state stays on disk, so that the node can
    /// never vote twice in a term of it if the group is added again. Answered `false` when the
    /// node takes no part in it.
    Remove {
        group: String,
        reply: oneshot::Sender<bool>,
    },
}

/// What the process's elections share: built once, before any election is added.
pub struct Wiring {
    pub transport: Arc<dyn Transport>,
    /// The cluster key ring; `None` accepts unsigned messages (peers unauthenticated).
    pub keys: Option<KeyRing>,
    pub inbound: mpsc::Receiver<Vec<u8>>,
    pub metrics: Arc<Metrics>,
    /// What this node announces to clients (`--advertise-url`, `--meta`).
    pub info: Option<NodeInfo>,
    /// The process's store, for the replay marks; `None` for an observer, which keeps
    /// nothing (its replay guard starts empty at each start).
    pub store: Option<Store>,
    /// The persisted state of every group beside the default one (`None`: an observer's).
    pub book: Option<Arc<Mutex<crate::store::Book>>>,
    /// This node's id.
    pub node_id: String,
    /// Elections added and removed while the node runs.
    pub group_changes: mpsc::Receiver<GroupChange>,
    /// The events transport's reports ([`crate::transport::Started::reports`]).
    pub reports: Option<mpsc::Receiver<Report>>,
}

/// How the API and the companions reach one election of the loop.
pub struct ElectionHandle {
    /// Its view, as of the loop's last step for it.
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    /// Its operator commands (and the health checks' verdicts).
    pub commands: mpsc::Sender<Command>,
    /// `POST /pause` and `DELETE /pause`.
    pub maintenance: mpsc::Sender<MaintenanceRequest>,
    /// What its schedule writes through, if it runs one (`ElectionParts::scheduled`).
    pub firings: Option<FiringWrites>,
}

impl Runtime {
    /// Returns the runtime, with no election yet, and the loop clock.
    pub fn new(wiring: Wiring) -> (Runtime, LastTurn) {
        let now = clock::now();
        let last_turn = Arc::new(Mutex::new(now));
        // Only signed messages are de-replayed (unsigned ones prove nothing about their sender).
        let replay = match (&wiring.keys, &wiring.store) {
            (Some(_), Some(store)) => ReplayGuard::from_marks(&store.replay_marks()),
            _ => ReplayGuard::new(),
        };
        // Saved again as loaded, so a sender silent during this run keeps its mark.
        let marks = replay.marks();
        let rt = Runtime {
            elections: BTreeMap::new(),
            observations: BTreeMap::new(),
            reports: wiring.reports,
            default_group: None,
            shared: Shared {
                health: Arc::new(wiring.transport.health()),
                transport: wiring.transport,
                keys: wiring.keys,
                info: wiring.info,
                directory: Arc::new(Directory::default()),
                metrics: wiring.metrics,
            },
            out: Outbox::new(wiring.node_id, wiring.book),
            store: wiring.store,
            inbound: wiring.inbound,
            requests: SelectAll::new(),
            group_changes: wiring.group_changes,
            writers: Vec::new(),
            flush_now: CancellationToken::new(),
            last_turn: last_turn.clone(),
            watchdog: crate::notify::Watchdog::from_env(),
            replay,
            replay_out: watch::Sender::new(marks),
            stray_log: KeyedLogLimit::new(STRAY_LOG_EVERY, STRAY_SENDERS_NAMED),
        };
        (rt, last_turn)
    }

    /// Adds the election of `parts.group` to the loop: from now on it takes that group's
    /// messages and its own requests. Returns how to reach it.
    pub fn add_election(&mut self, parts: ElectionParts) -> ElectionHandle {
        let group: Arc<str> = parts.group.as_str().into();
        let scheduled = parts.scheduled;
        if self.elections.is_empty() {
            // Every group has the node's member set: who may be sent batches is judged once.
            let me = parts.node.id().to_string();
            let others: Vec<String> = (parts.node.members().ids())
                .filter(|id| *id != me)
                .map(str::to_string)
                .collect();
            self.out.set_members(others.iter().map(String::as_str));
        }
        let (election, snapshot) = Election::new(parts, &self.shared, clock::now());
        let (commands, commands_rx) = mpsc::channel(64);
        let (maintenance, maintenance_rx) = mpsc::channel(8);
        self.requests.push(tagged(group.clone(), commands_rx, |c| {
            Request::Command(Box::new(c))
        }));
        self.requests
            .push(tagged(group.clone(), maintenance_rx, Request::Maintenance));
        let firings = scheduled.then(|| {
            let (tx, rx) = mpsc::channel(4);
            self.requests
                .push(tagged(group.clone(), rx, Request::Firing));
            FiringWrites {
                records: tx,
                store: election.store.clone(),
            }
        });
        self.default_group.get_or_insert_with(|| group.to_string());
        self.elections.insert(group.to_string(), election);
        ElectionHandle {
            snapshot,
            commands,
            maintenance,
            firings,
        }
    }

    /// Adds the observed election of `parts.group` to the loop (`run --observe`): from now on
    /// it takes that group's messages, or the reports of the members it follows over http.
    pub fn add_observation(&mut self, parts: ObservationParts) -> ObservationHandle {
        let group = parts.group.clone();
        let (observation, handle) = Observation::new(parts, &self.shared, clock::now());
        self.observations.insert(group, observation);
        handle
    }

    /// Every resign of `group`'s election waits for `guard` first (see [`ReleaseGuard`]), and
    /// for every guard given before it, all at once.
    pub fn guard_releases(&mut self, group: &str, guard: ReleaseGuard) {
        self.election_mut(group).guard_releases(guard);
    }

    /// Reports every change of `group`'s leader or of this node's role in it from now on,
    /// starting with a `start` change of the current view (see [`Change`]).
    pub fn report_changes(&mut self, group: &str) -> watch::Receiver<Change> {
        self.election_mut(group).report_changes()
    }

    fn election_mut(&mut self, group: &str) -> &mut Election {
        self.elections
            .get_mut(group)
            .unwrap_or_else(|| panic!("no election of group {group} in this runtime"))
    }

    /// Runs until `stop` is cancelled and, for every election this node led, its successor is
    /// known (or the grace period ran out). An error means a state could not be made durable:
    /// the node must not go on.
    pub async fn run(mut self, stop: CancellationToken) -> Result<(), RuntimeError> {
        // Each file has one writer task, so that writes never race; the loop only hands them
        // the latest content.
        let flush_now = self.flush_now.clone();
        let mut writers: Vec<_> = self
            .elections
            .values()
            .map(|e| e.history_writer(&flush_now))
            .collect();
        if let (Some(_), Some(store)) = (&self.shared.keys, &self.store) {
            // Marks change with every signed message: at most one save per heartbeat interval.
            writers.push(tokio::spawn(file_writer(
                "replay marks",
                store.clone(),
                self.replay_out.subscribe(),
                self.heartbeat(),
                flush_now.clone(),
                |store: &Store, marks: &BTreeMap<String, u64>| store.save_replay_marks(marks),
            )));
        }
        self.writers = writers;
        let result = self.drive(stop).await;
        // The last transitions (a shutdown's, typically) and marks must not be lost to the
        // exit: hand the writers the final content, close their channels, wait for them.
        for election in self.elections.values_mut() {
            election.close_history();
        }
        drop(std::mem::replace(
            &mut self.replay_out,
            watch::Sender::new(BTreeMap::new()),
        ));
        flush_now.cancel();
        let all = futures_util::future::join_all(std::mem::take(&mut self.writers));
        let sent = self.shared.transport.flushed();
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

    /// The shortest heartbeat interval of the elections: the loop turns at least this often.
    fn heartbeat(&self) -> Duration {
        let shortest = self.elections.values().map(|e| e.node.timings().heartbeat);
        shortest.min().unwrap_or(Duration::from_secs(1))
    }

    async fn drive(&mut self, stop: CancellationToken) -> Result<(), RuntimeError> {
        let h = self.heartbeat();
        let mut stopping: Option<Stopping> = None;
        for election in self.elections.values_mut() {
            election.publish_snapshot(&self.shared, clock::now());
        }
        for observation in self.observations.values_mut() {
            observation.publish(&self.shared, clock::now());
        }
        loop {
            // Before anything else: a restarted node holds the pause it kept on disk from its
            // first step, and a pause that reached its end lapses here.
            // Only where a pause was ever written: most of a thousand groups never had one.
            for election in self.elections.values_mut() {
                if election.maintenance.is_some() || election.maintenance_in_core {
                    election
                        .sync_maintenance(&self.shared, &mut self.out)
                        .await?;
                }
            }
            self.flush(Self::pacing(&stopping)).await?;
            let now = clock::now();
            self.shared.refresh_health();
            *self.last_turn.lock().unwrap_or_else(|e| e.into_inner()) = now;
            self.watchdog.pet(now);
            if let Some(s) = &stopping {
                if self.may_exit(s, now) {
                    return Ok(());
                }
            }
            let next = self.elections.values().filter_map(|e| e.deadline);
            let observed = self.observations.values().map(Observation::deadline);
            let mut deadline = next.chain(observed).min().unwrap_or(now + h);
            if let Some(s) = &stopping {
                deadline = deadline.min(s.since + SHUTDOWN_GRACE);
            }
            // Messages held back for the transport's pace leave at the end of the turn that
            // wakes here.
            let release = self.out.release_at().filter(|r| *r < deadline);
            tokio::select! {
                _ = clock::sleep_until(deadline) => self.tick(deadline).await?,
                _ = clock::sleep_until(release.unwrap_or(deadline)), if release.is_some() => {}
                Some(bytes) = self.inbound.recv() => self.on_bytes(&bytes).await?,
                Some(report) = next_report(&mut self.reports) => self.on_report(&report),
                Some((group, request)) = self.requests.next() => {
                    self.on_request(&group, request).await?;
                }
                Some(change) = self.group_changes.recv(), if stopping.is_none() => {
                    self.on_group_change(change).await?;
                }
                _ = stop.cancelled(), if stopping.is_none() => {
                    stopping = Some(self.shut_down().await?);
                }
            }
            // What the turn persisted, then what it sent (rule 18).
            self.flush(Self::pacing(&stopping)).await?;
        }
    }

    /// A stopping node sends at once: its resigns must leave before it exits.
    fn pacing(stopping: &Option<Stopping>) -> Pacing {
        if stopping.is_some() {
            Pacing::Now
        } else {
            Pacing::Paced
        }
    }

    /// Ends the turn: its state on disk, then its messages on the wire (or held back for the
    /// transport's pace, unless `send` is [`Pacing::Now`]).
    async fn flush(&mut self, send: Pacing) -> Result<(), RuntimeError> {
        self.out
            .flush(self.shared.transport.as_ref(), &self.shared.metrics, send)
            .await
    }

    /// Every election whose deadline has come (at least the one that set `deadline`), or that
    /// has none, takes a tick.
    async fn tick(&mut self, deadline: Instant) -> Result<(), RuntimeError> {
        let due = clock::now().max(deadline);
        for election in self.elections.values_mut() {
            if election.deadline.is_none_or(|d| d <= due) {
                let _ = election
                    .step(&self.shared, &mut self.out, Input::Tick)
                    .await?;
            }
        }
        for observation in self.observations.values_mut() {
            if observation.deadline() <= due {
                observation.on_time(&self.shared, &mut self.out, due);
            }
        }
        Ok(())
    }

    /// A report of a member an observer follows over http, for every observed election (an
    /// observer follows one group, whose members' `/events` its transport follows).
    fn on_report(&mut self, report: &Report) {
        // The member it came from is the one the transport follows now: its snapshot says so.
        self.shared.refresh_health();
        let now = clock::now();
        for observation in self.observations.values_mut() {
            observation.on_report(&mut self.shared, now, report);
        }
    }

    async fn on_request(&mut self, group: &str, request: Request) -> Result<(), RuntimeError> {
        let Some(election) = self.elections.get_mut(group) else {
            // Requests come only through an election's handle: its election is still here.
            return Ok(());
        };
        match request {
            Request::Command(cmd) => {
                let result = election
                    .step(&self.shared, &mut self.out, cmd.input)
                    .await?;
                // Answered once what the command did has left.
                self.flush(Pacing::Now).await?;
                let _ = cmd.reply.send(result);
            }
            Request::Maintenance(req) => {
                election
                    .on_maintenance_request(&self.shared, &mut self.out, req)
                    .await?
            }
            Request::Firing(req) => election.on_firing_request(&self.shared, req).await,
        }
        Ok(())
    }

    async fn on_group_change(&mut self, change: GroupChange) -> Result<(), RuntimeError> {
        match change {
            GroupChange::Add {
                parts,
                report_changes,
                reply,
            } => {
                let group = parts.group.clone();
                let handle = self.add_election(*parts);
                let changes = report_changes.then(|| self.report_changes(&group));
                let election = (self.elections.get_mut(&group)).expect("just added");
                let writer = election.history_writer(&self.flush_now);
                election.publish_snapshot(&self.shared, clock::now());
                self.writers.push(writer);
                tracing::info!(group = %group, groups = self.elections.len(), "group added");
                let _ = reply.send((handle, changes));
            }
            GroupChange::Guard {
                group,
                guard,
                reply,
            } => {
                if let Some(election) = self.elections.get_mut(&group) {
                    election.guard_releases(guard);
                }
                let _ = reply.send(());
            }
            GroupChange::Remove { group, reply } => {
                let Some(mut election) = self.elections.remove(&group) else {
                    let _ = reply.send(false);
                    return Ok(());
                };
                let now = clock::now();
                let was_leader = election.node.view(now).is_leader_at(now);
                // As at shutdown: a leader resigns, naming its successor when it can, so the
                // group elects at once rather than after `T`.
                let _ = election
                    .step(&self.shared, &mut self.out, Input::Shutdown)
                    .await?;
                self.flush(Pacing::Now).await?;
                election.close_history();
                tracing::info!(group = %group, was_leader, groups = self.elections.len(), "group removed");
                let _ = reply.send(true);
            }
        }
        Ok(())
    }

    /// Tells every election to shut down, and notes which of them lead and can hand over.
    async fn shut_down(&mut self) -> Result<Stopping, RuntimeError> {
        let now = clock::now();
        let mut hand_over = BTreeMap::new();
        for (group, election) in &mut self.elections {
            let was_leader = election.node.view(now).is_leader_at(now);
            // With no live candidate (a single node, or every peer silent or withdrawn)
            // nobody can take over soon: waiting out the grace would only delay the exit.
            let can_hand_over = election.node.has_successor(now);
            tracing::info!(group = %group, was_leader, can_hand_over, "shutting down");
            let _ = election
                .step(&self.shared, &mut self.out, Input::Shutdown)
                .await?;
            hand_over.insert(group.clone(), was_leader && can_hand_over);
        }
        Ok(Stopping {
            since: now,
            hand_over,
        })
    }

    /// Whether every election is done with its shutdown (the core's stop policy, per election).
    fn may_exit(&self, s: &Stopping, now: Instant) -> bool {
        let waited = now.saturating_duration_since(s.since);
        let mut exits = Vec::with_capacity(self.elections.len());
        for (group, election) in &self.elections {
            let hand_over = s.hand_over.get(group).copied().unwrap_or(false);
            match stop::exit_now(hand_over, &election.node.view(now), waited) {
                None => return false,
                Some(exit) => exits.push((group, election.node.term(), exit)),
            }
        }
        for (group, term, exit) in exits {
            match exit {
                Exit::NothingToWaitFor => {}
                Exit::HandedOver { successor } => tracing::info!(
                    group = %group,
                    successor = %successor,
                    term,
                    handover_ms = waited.as_millis() as u64,
                    "handed leadership over; exiting"
                ),
                Exit::GraceOver => tracing::warn!(
                    group = %group,
                    grace_ms = SHUTDOWN_GRACE.as_millis() as u64,
                    "no successor known within the grace period; exiting"
                ),
            }
        }
        true
    }

    /// One wire message: a message alone, or a batch of them (rule 18), each of which is
    /// taken exactly as if it had come alone.
    async fn on_bytes(&mut self, bytes: &[u8]) -> Result<(), RuntimeError> {
        // The reading holds its own handle on the keys while each message goes to the core.
        let keys = self.shared.keys.clone();
        let reader = match inbound::read(bytes, keys.as_ref()) {
            Ok(reader) => reader,
            Err(e) => {
                tracing::debug!(error = %e, "dropped a batch");
                self.shared
                    .metrics
                    .received(MessageType::Unknown, (&e).into());
                self.observations.values().for_each(Observation::rejected);
                return Ok(());
            }
        };
        // The node's own batch, back from a transport that delivers to itself: none of its
        // messages would change anything.
        if reader.from == Some(self.out.node_id()) {
            return Ok(());
        }
        for checked in reader {
            // The replay guard sits below membership on purpose: it tracks what each holder of
            // the cluster key sent (a stray node with the key included), so that no recording
            // of it can be played back; the election state of rule 1 is the core's, which a
            // non-member never changes.
            let checked = match (&keys, checked) {
                (Some(_), Ok(m)) => {
                    let key = self.replay_key(&m);
                    self.replay.check(&key, m.seq).map(|()| {
                        self.record_mark(&key);
                        m
                    })
                }
                (_, checked) => checked,
            };
            self.on_checked(checked).await?;
        }
        Ok(())
    }

    /// Nothing forged, replayed or malformed reaches the core; each drop is counted by reason.
    async fn on_checked(
        &mut self,
        checked: Result<Message, Rejection>,
    ) -> Result<(), RuntimeError> {
        let msg = match checked {
            Ok(msg) => msg,
            Err(e) => {
                tracing::debug!(error = %e, reason = e.reason(), "dropped a message");
                self.shared
                    .metrics
                    .received(MessageType::Unknown, (&e).into());
                self.observations.values().for_each(Observation::rejected);
                return Ok(());
            }
        };
        let kind = MessageType::from(&msg.body);
        if let Some(observation) = self.observations.get_mut(&msg.group) {
            observation.on_message(&mut self.shared, clock::now(), &msg);
            self.shared.metrics.received(kind, Received::Observed);
            return Ok(());
        }
        let Some(election) = self.elections.get_mut(&msg.group) else {
            // A group this process takes no part in: nothing of it is read.
            let received = if msg.observer {
                Received::Observer
            } else {
                (&Outcome::Ignored).into()
            };
            self.shared.metrics.received(kind, received);
            return Ok(());
        };
        let member = election.node.members().contains(&msg.from);
        if msg.observer {
            // An observer's announcement: recorded, never a stray, never the core's. A member's
            // id in one is a misconfigured observer; it changes nothing either.
            if !member {
                election
                    .observers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .heard(clock::now(), &msg.from);
            }
            self.shared.metrics.received(kind, Received::Observer);
            return Ok(());
        }
        if member {
            self.shared.record_info(&msg);
            self.out.heard(&msg.from, msg.batches);
            // Before the message itself: a resign that arrives with the pause that came first
            // must find the core already holding its campaigns back.
            if let Some(write) = &msg.maintenance {
                election
                    .on_maintenance_heard(&self.shared, &mut self.out, write)
                    .await?;
            }
            election.note_carried(&msg.from, msg.maintenance.as_ref());
            // Before the message itself too: the ack this node's core answers it with must
            // carry the record (rule 19).
            election.on_firing_heard(&msg).await;
        }
        let (from, members) = (msg.from.clone(), msg.members.clone());
        let stepped = election
            .step(&self.shared, &mut self.out, Input::Message(msg))
            .await?;
        let outcome = match stepped {
            Ok(o) => o,
            Err(_) => Outcome::Ignored,
        };
        self.shared.metrics.received(kind, (&outcome).into());
        let ours = election.node.members();
        log_stray(&mut self.stray_log, (&from, &members), &outcome, ours);
        Ok(())
    }

    /// Whose sequence numbers `m`'s is checked against. Each election of a sender numbers its
    /// messages on its own (its store's boot counter starts them), so a sender's groups are
    /// separate senders here: the default group's under the sender's id, as a node of one
    /// election keeps its marks, any other's under the id and the group, joined by a control
    /// character no group name has.
    fn replay_key(&self, m: &Message) -> String {
        if self.default_group.as_deref() == Some(m.group.as_str()) {
            m.from.clone()
        } else {
            format!("{}\u{1f}{}", m.from, m.group)
        }
    }

    /// Hands the writer the guard's new highest number for `from`. The copy is kept up to date
    /// entry by entry (a whole copy per message would cost one allocation per tracked sender),
    /// and rebuilt only when the guard has forgotten a sender to stay bounded.
    fn record_mark(&self, from: &str) {
        if self.store.is_none() {
            // An observer's: kept in memory only, nobody writes them.
            return;
        }
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
}

/// The command senders of every election of the node, for what concerns the node as a whole
/// (the application's health): those it started with and those added since.
#[derive(Clone, Default)]
pub struct EveryElection {
    senders: Arc<Mutex<Vec<mpsc::Sender<Command>>>>,
}

impl EveryElection {
    pub fn new(senders: Vec<mpsc::Sender<Command>>) -> EveryElection {
        EveryElection {
            senders: Arc::new(Mutex::new(senders)),
        }
    }

    pub fn add(&self, sender: mpsc::Sender<Command>) {
        self.lock().push(sender);
    }

    /// Forgets the election `sender` commands (it was removed).
    pub fn remove(&self, sender: &mpsc::Sender<Command>) {
        self.lock().retain(|s| !s.same_channel(sender));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<mpsc::Sender<Command>>> {
        self.senders.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One sender for all of them: each command goes to every election, and is answered with
    /// the first one's answer once every election has answered.
    pub fn sender(&self) -> mpsc::Sender<Command> {
        let (tx, mut rx) = mpsc::channel::<Command>(8);
        let every = self.clone();
        tokio::spawn(async move {
            while let Some(cmd) = rx.recv().await {
                let senders = every.lock().clone();
                let mut answers = Vec::with_capacity(senders.len());
                for election in &senders {
                    let (reply, answer) = oneshot::channel();
                    let input = cmd.input.clone();
                    if election.send(Command { input, reply }).await.is_ok() {
                        answers.push(answer);
                    }
                }
                let mut first = None;
                for answer in answers {
                    if let Ok(result) = answer.await {
                        first.get_or_insert(result);
                    }
                }
                if let Some(result) = first {
                    let _ = cmd.reply.send(result);
                }
            }
        });
        tx
    }
}

/// Names a sender that is not a member, or whose member set differs from `members`, the
/// election's own. An operator must see a stray node at once, by name; a flood of made-up sender
/// ids must cost neither a log line nor memory each (`stray_log`).
fn log_stray(
    stray_log: &mut KeyedLogLimit<(String, &'static str)>,
    (from, fingerprint): (&str, &str),
    outcome: &Outcome,
    members: &MemberSet,
) {
    let why = match outcome {
        Outcome::NotMember => "not_member",
        Outcome::OtherMembers => "other_members",
        _ => return,
    };
    let Some(left_out) = stray_log.admit(clock::now(), (from.to_string(), why)) else {
        return;
    };
    if left_out > 0 {
        tracing::warn!(
                left_out,
                "messages of more stray senders than are named each minute were not logged (the metrics count them all)"
            );
    }
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

/// A shutdown under way: since when, and which elections wait for a successor.
struct Stopping {
    since: Instant,
    hand_over: BTreeMap<String, bool>,
}

/// The next report of the events transport; never, without one.
async fn next_report(reports: &mut Option<mpsc::Receiver<Report>>) -> Option<Report> {
    match reports {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// `rx` as a stream of requests of `group`.
fn tagged<T: Send + 'static>(
    group: Arc<str>,
    rx: mpsc::Receiver<T>,
    wrap: fn(T) -> Request,
) -> BoxStream<'static, (Arc<str>, Request)> {
    futures_util::stream::unfold(rx, move |mut rx| {
        let group = group.clone();
        async move { rx.recv().await.map(|t| ((group, wrap(t)), rx)) }
    })
    .boxed()
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

/// The view of node `node_id` in `term`: leading until `lease_until` if it is given, else
/// following nobody; eligible, healthy, no promise. Tests change what they need from there, so
/// that a field added to [`View`] is one edit here.
#[cfg(test)]
pub(crate) fn test_view(node_id: &str, term: u64, lease_until: Option<Instant>) -> View {
    View {
        node_id: node_id.into(),
        role: if lease_until.is_some() {
            Role::Leader
        } else {
            Role::Follower
        },
        term,
        leader: lease_until.map(|_| node_id.into()),
        voted_for: None,
        lease_until,
        leader_until: lease_until,
        leader_heard_at: None,
        leader_since: None,
        priority: 1,
        eligible: true,
        candidacy: crate::election::Candidacy::Eligible,
        can_campaign: false,
        can_vote: true,
        config_conflicts: Vec::new(),
        shutting_down: false,
        promise: None,
        writes_version: 3,
        maintenance: false,
        healthy: true,
    }
}
