//! One way to assemble a node: data dir → core → transport → runtime → API state. The binary,
//! the tests and the benchmarks all build nodes here, so protocol details (the sequence-number
//! epoch, the seed) live in one place and the transport is just a parameter.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use axum::Router;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::api::{
    AppParts, AppState, Auth, ElectionApi, Elections, EventSource, GroupControl, GroupFuture,
    GroupRefusal, Subscribers,
};
use crate::election::{Config, MemberSet, Node, NodeInfo, Timings};
use crate::exec::{Exec, ExecConfig};
use crate::exit_budget;
use crate::group::GroupSelection;
use crate::health_check::{HealthCheckConfig, HealthChecks};
use crate::hooks::{HookConfig, Hooks};
use crate::metrics::Metrics;
use crate::observer::{Observer, ObserverConfig};
use crate::observer_table::ObserverTable;
use crate::runtime::{
    Command, ElectionHandle, ElectionParts, EveryElection, FiringWrites, GroupChange, Keeps,
    ReleaseGuard, Runtime, RuntimeError, Snapshot, Wiring,
};
use crate::schedule::Schedule;
use crate::server::{Limits, Listeners, PeerRoutes};
use crate::signing::KeyRing;
use crate::store::{self, Book, Loaded, Store, StoreError};
use crate::tls::Tls;
use crate::transport::{
    self, Inbound, Ingress, StartError, Started, Transport, TransportConfig, INBOUND_CAPACITY,
};

/// Everything one node needs, already validated.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: String,
    /// The default group: its state is the data directory's own, and the routes that name no
    /// group answer for it.
    pub group: String,
    /// The other groups this node takes part in, each its own election with its state under
    /// `<data-dir>/groups/<group>/` ([`group_dir`]).
    pub extra_groups: Vec<String>,
    /// `--priority` was not given: each extra group ranks this node by a priority of its own
    /// ([`group_priority`]), so that with equal settings the groups' leaders spread over the
    /// nodes instead of all landing on the one with the highest id checksum.
    pub spread_priorities: bool,
    /// The most groups the node takes part in: a `POST /groups` past it is refused.
    pub max_groups: usize,
    /// How messages reach the other members, and its settings.
    pub transport: TransportConfig,
    /// The voting members, this node included (docs/protocol.md, rule 1).
    pub members: MemberSet,
    pub priority: u32,
    pub eligible: bool,
    pub data_dir: PathBuf,
    pub timings: Timings,
    pub admin_token: Option<String>,
    pub allow_unauthenticated: bool,
    pub reset_state: bool,
    /// `--accept-member-change`: start even if the member set is more than one id away from the
    /// one this data directory last ran with.
    pub accept_member_change: bool,
    /// Cluster keys (`--cluster-key-file`); `None` leaves peers unauthenticated.
    pub cluster_keys: Option<KeyRing>,
    /// Connection caps and timeouts of the HTTP server.
    pub limits: Limits,
    /// `--exec`: a command to run while this node leads.
    pub exec: Option<ExecConfig>,
    /// `--exec-groups`: the groups whose leadership runs `exec`, a child each.
    pub exec_groups: GroupSelection,
    /// `--schedule` and its command: leader-only runs at each firing, in the groups it names.
    pub schedule: Option<crate::schedule::ScheduleConfig>,
    /// `--on-change`: a command to run on every change of the leader or of this node's role.
    pub on_change: Option<HookConfig>,
    /// `--on-change-groups`: the groups whose changes run `on_change`.
    pub on_change_groups: GroupSelection,
    /// `--metrics-groups`: the groups with series of their own in `/metrics` (`None`: none).
    pub metrics_groups: Option<GroupSelection>,
    /// `--health-cmd` or `--health-url`: the application's health, which leadership follows
    /// (docs/protocol.md, rule 17).
    pub health_check: Option<HealthCheckConfig>,
    /// `--advertise-url` and `--meta`, announced to clients (docs/clients.md); `None`
    /// announces nothing.
    pub info: Option<NodeInfo>,
    /// `--tls-cert` and friends, loaded and checked: TLS on the listeners and to `https://`
    /// peers, reloaded on SIGHUP; `None` is plain HTTP.
    pub tls: Option<Arc<Tls>>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(
        "this data directory last ran with the members {{{previous}}}; the configured set \
         {{{configured}}} differs from it by {} ids ({}). Change one member at a time \
         (docs/guide/operations.md, \"Changing the members\"): member sets two ids apart may not \
         share a quorum, so both could elect a leader. To re-form the cluster on purpose, with \
         every node stopped, start each node once with --accept-member-change",
        .difference.len(),
        .difference.join(", ")
    )]
    MemberChange {
        previous: String,
        configured: String,
        difference: Vec<String>,
    },
    #[error(transparent)]
    Transport(#[from] StartError),
    #[error("the election loop died: {0}")]
    LoopDied(String),
}

/// Makes a transport from the node's inbound queue, its metrics and a token that stops the
/// transport's background tasks.
pub type TransportFactory =
    Box<dyn FnOnce(Inbound, Arc<Metrics>, CancellationToken) -> Arc<dyn Transport> + Send>;

/// Builds a node from its configuration; the transport follows the configuration unless one
/// is given.
pub struct NodeBuilder {
    config: NodeConfig,
    transport: Option<TransportFactory>,
    seed: Option<u64>,
}

/// A node ready to run: its election loop and the API state that reads it.
pub struct BuiltNode {
    pub runtime: Runtime,
    pub state: AppState,
    limits: Limits,
    tls: Option<Arc<Tls>>,
    /// The requests of the transport's peers, for the server.
    peer_routes: PeerRoutes,
    /// The `--exec` supervisors and `--on-change` tasks of every election that has them.
    actors: Actors,
    /// The `--health-cmd`/`--health-url` checks, if any.
    health: Option<HealthChecks>,
    /// Stops the transport when the node is done; it outlives the loop's shutdown, because a
    /// leader handing over must still hear its successor win.
    transport_stop: CancellationToken,
}

impl NodeBuilder {
    pub fn new(config: NodeConfig) -> NodeBuilder {
        NodeBuilder {
            config,
            transport: None,
            seed: None,
        }
    }

    /// Replaces the configured transport (tests: a memory bus, a faulty link).
    pub fn transport(
        mut self,
        make: impl FnOnce(Inbound, Arc<Metrics>, CancellationToken) -> Arc<dyn Transport>
            + Send
            + 'static,
    ) -> NodeBuilder {
        self.transport = Some(Box::new(make));
        self
    }

    /// Fixes the seed of the core's jitter (default: from the clock and the process id).
    pub fn seed(mut self, seed: u64) -> NodeBuilder {
        self.seed = Some(seed);
        self
    }

    pub fn build(self) -> Result<BuiltNode, RunError> {
        let config = self.config;
        if let TransportConfig::Events(_) = config.transport {
            return Err(StartError::ObserverOnly.into());
        }
        // Every election of the process heartbeats on this beat (rule 18).
        let beat = crate::clock::now();
        let loaded = Store::open(&config.data_dir, config.reset_state)?;
        let book = Arc::new(std::sync::Mutex::new(Book::open(
            &config.data_dir.join("groups"),
            config.reset_state,
        )?));
        if config.reset_state {
            tracing::warn!(dir = %config.data_dir.display(), "state reset by --reset-state: starting at term 0");
        }
        check_member_change(&loaded.store, &config.members, config.accept_member_change)?;
        let seed = self.seed.unwrap_or_else(|| {
            crate::clock::wall::unix_ms_now() ^ (u64::from(std::process::id()) << 32)
        });
        let node = core(&config, &loaded, seed, beat);
        let metrics = Arc::new(Metrics::new());
        let (in_tx, in_rx) = mpsc::channel(INBOUND_CAPACITY);
        let transport_stop = CancellationToken::new();
        let Started {
            transport,
            ingress,
            reports,
        } = match self.transport {
            // A test's stand-in for the http transport (a memory bus, a faulty link): its node
            // takes `POST /peer/messages` as an http node does.
            Some(make) => Started {
                transport: make(in_tx.clone(), metrics.clone(), transport_stop.clone()),
                ingress: Some(transport::http::ingress(in_tx.clone(), metrics.clone())),
                reports: None,
            },
            None => config.transport.start(transport::Start {
                inbound: in_tx,
                metrics: metrics.clone(),
                stop: transport_stop.clone(),
                quorum: config.members.quorum(),
                tls: config.tls.clone(),
            })?,
        };
        let observers = ObserverTable::shared();
        let (group_changes, group_changes_rx) = mpsc::channel(8);
        let (mut runtime, last_turn) = Runtime::new(Wiring {
            transport,
            keys: config.cluster_keys.clone(),
            inbound: in_rx,
            metrics: metrics.clone(),
            info: config.info.clone(),
            store: Some(loaded.store.clone()),
            book: Some(book.clone()),
            node_id: config.node_id.clone(),
            group_changes: group_changes_rx,
            reports,
        });
        let added = added_groups(&config, &loaded.store)?;
        let default_store = loaded.store.clone();
        let ElectionHandle {
            snapshot,
            commands: cmd_tx,
            maintenance: maintenance_tx,
            firings,
        } = runtime.add_election(ElectionParts {
            group: config.group.clone(),
            node,
            store: loaded.store,
            keeps: Keeps::OwnFiles,
            history: loaded.history,
            observers: observers.clone(),
            firing: loaded.firing,
            scheduled: Acting::scheduled(&config, &config.group),
        });
        tracing::info!(
            node = %config.node_id,
            term = loaded.persistent.term,
            boot = loaded.boot,
            members = %config.members,
            quorum = config.members.quorum(),
            "node starting"
        );
        let at_start: Vec<String> = config.extra_groups.iter().chain(&added).cloned().collect();
        let extra = extra_elections(&config, &at_start, &mut runtime, (seed, beat), &book)?;
        // The application's health is the node's: every election follows it.
        let every_group = EveryElection::new(
            std::iter::once(cmd_tx.clone())
                .chain(extra.iter().map(|e| e.handle.commands.clone()))
                .collect(),
        );
        // Verdicts go straight to the loops: a handover they cause waits for the release
        // guards, like any resign.
        let health = (config.health_check.clone())
            .map(|h| HealthChecks::start(h, every_group.sender(), metrics.clone()));
        let actors = Actors::default();
        let (acting, commands) = Acting::start_in(
            &config,
            &mut runtime,
            &config.group,
            (&snapshot, cmd_tx, firings),
            &metrics,
        );
        let hooks = acting.hooks.as_ref().map(Hooks::handle);
        let holds = acting.holds.clone();
        let schedule = acting.schedule.as_ref().map(Schedule::handle);
        actors.add(acting);
        let events = EventSource::eager(snapshot.clone(), event_run(&config.node_id, loaded.boot));
        let scheduler =
            crate::scheduled::Scheduler::start(snapshot.clone(), commands.clone(), holds.clone());
        let election = ElectionApi {
            group: config.group.clone(),
            scheduler,
            snapshot,
            commands,
            maintenance: maintenance_tx,
            events,
            hooks,
            health: health.as_ref().map(HealthChecks::handle),
            observers,
            reads: Default::default(),
            holds,
            schedule,
        };
        let health_handle = health.as_ref().map(HealthChecks::handle);
        let mut commands_of = BTreeMap::new();
        let mut others = Vec::with_capacity(extra.len());
        for e in extra {
            commands_of.insert(e.group.clone(), e.handle.commands.clone());
            let (acting, commands) = Acting::start_in(
                &config,
                &mut runtime,
                &e.group,
                (
                    &e.handle.snapshot,
                    e.handle.commands.clone(),
                    e.handle.firings.clone(),
                ),
                &metrics,
            );
            let acts = (
                commands,
                acting.hooks.as_ref().map(Hooks::handle),
                acting.holds.clone(),
                acting.schedule.as_ref().map(Schedule::handle),
            );
            actors.add(acting);
            others.push(e.api(&config.node_id, acts, health_handle.clone()));
        }
        let maker = GroupMaker {
            config: config.clone(),
            seed,
            beat,
            book,
            changes: group_changes,
            every: every_group,
            health: health_handle,
            actors: actors.clone(),
            metrics: metrics.clone(),
            store: default_store,
            state: tokio::sync::Mutex::new(Added {
                groups: added,
                commands_of,
            }),
        };
        let state = AppState::new(AppParts {
            elections: Elections::new(election, others),
            groups: Some(Arc::new(maker)),
            tls: config.tls.clone(),
            ingress: ingress.as_ref().map(|i| i.router.clone()),
            last_turn,
            metrics,
            metrics_groups: config.metrics_groups.clone(),
            auth: Arc::new(Auth {
                token: config.admin_token.clone(),
                allow_unauthenticated: config.allow_unauthenticated,
            }),
            subscribers: Subscribers::new(config.limits.max_event_subscribers),
            observing: None,
        });
        Ok(BuiltNode {
            runtime,
            state,
            limits: config.limits,
            tls: config.tls,
            peer_routes: PeerRoutes(ingress.map_or(&[], |i: Ingress| i.routes)),
            actors,
            health,
            transport_stop,
        })
    }
}

/// What acts for one election outside the loop, each when configured for its group:
/// `--exec` (a child while this node leads the group) and `--on-change` (a run per change).
struct Acting {
    exec: Option<Exec>,
    hooks: Option<Hooks>,
    /// The holds of `pilot-election once` (every election has them).
    holds: crate::jobs::Holds,
    /// `--schedule`'s firings in this group.
    schedule: Option<Schedule>,
}

impl Acting {
    /// Whether `config` has `group`'s election run `--schedule`.
    fn scheduled(config: &NodeConfig, group: &str) -> bool {
        (config.schedule.as_ref()).is_some_and(|s| s.groups.includes(group, group == config.group))
    }

    /// Whether `config` has `group`'s election run `--exec` and `--on-change`.
    fn wanted(config: &NodeConfig, group: &str) -> (bool, bool) {
        let default = group == config.group;
        (
            config.exec.is_some() && config.exec_groups.includes(group, default),
            config.on_change.is_some() && config.on_change_groups.includes(group, default),
        )
    }

    /// Starts what `group`'s election (its snapshots, its command sender) needs: `changes` for
    /// the hook, when it runs one. Returns it, the release guards its resigns must wait for,
    /// and the sender the API must command it through (the `--exec` gate, when it has a child:
    /// a handover asked through the API waits for the child to stop).
    fn start(
        config: &NodeConfig,
        group: &str,
        (snapshot, commands, firings): (
            &watch::Receiver<Arc<Snapshot>>,
            mpsc::Sender<Command>,
            Option<FiringWrites>,
        ),
        changes: Option<watch::Receiver<crate::runtime::Change>>,
        metrics: &Arc<Metrics>,
    ) -> (Acting, Vec<ReleaseGuard>, mpsc::Sender<Command>) {
        let (wants_exec, _) = Acting::wanted(config, group);
        let mut guards = Vec::new();
        let exec = config.exec.clone().filter(|_| wants_exec).map(|mut e| {
            e.group = group.to_string();
            Exec::start(e, snapshot.clone(), commands.clone(), metrics.clone())
        });
        if let Some(x) = &exec {
            guards.push(x.handle().release_guard(config.timings));
        }
        // With --on-change, a resign also waits for the run that reports the end of leadership.
        let hooks = config.on_change.clone().zip(changes).map(|(h, changes)| {
            let who = (config.node_id.clone(), group.to_string());
            Hooks::start(h, changes, who, config.timings, metrics.clone())
        });
        if let Some(h) = &hooks {
            guards.push(h.handle().release_guard());
        }
        // A resign waits for the leader-only jobs' holds too, and so does a handover asked
        // through the API (`jobs::command`, before --exec's gate).
        let holds = crate::jobs::Holds::new(&config.timings);
        guards.push(holds.release_guard());
        let schedule = config.schedule.clone().zip(firings).map(|(s, w)| {
            let election = crate::schedule::Election {
                group: group.to_string(),
                node_id: config.node_id.clone(),
                snapshot: snapshot.clone(),
                writes: w.records,
                store: w.store,
                holds: holds.clone(),
                confirm_within: config.timings.election_timeout,
            };
            Schedule::start(Arc::new(s), election, metrics.clone())
        });
        let commands = match &exec {
            Some(x) => x.gate(commands, snapshot.clone()),
            None => commands,
        };
        (
            Acting {
                exec,
                hooks,
                holds,
                schedule,
            },
            guards,
            commands,
        )
    }

    /// [`Acting::start`] for an election of the loop that has not started yet.
    fn start_in(
        config: &NodeConfig,
        runtime: &mut Runtime,
        group: &str,
        election: (
            &watch::Receiver<Arc<Snapshot>>,
            mpsc::Sender<Command>,
            Option<FiringWrites>,
        ),
        metrics: &Arc<Metrics>,
    ) -> (Acting, mpsc::Sender<Command>) {
        let (_, wants_hooks) = Acting::wanted(config, group);
        let changes = wants_hooks.then(|| runtime.report_changes(group));
        let (acting, guards, commands) = Acting::start(config, group, election, changes, metrics);
        for guard in guards {
            runtime.guard_releases(group, guard);
        }
        (acting, commands)
    }
}

/// The `--exec` and `--on-change` of every election that has them, those of groups added while
/// the node runs too: the exit stops and waits for each.
#[derive(Clone, Default)]
struct Actors(Arc<Mutex<Vec<Acting>>>);

impl Actors {
    fn add(&self, acting: Acting) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(acting);
    }

    /// The exit has begun: every hook run from now on ends within its share of the exit
    /// budget, and every child stops before a leader hands over (its successor may lead at
    /// once).
    async fn exiting(&self) {
        let (drains, hooks, holds): (Vec<_>, Vec<_>, Vec<_>) = {
            let all = self.0.lock().unwrap_or_else(|e| e.into_inner());
            // No firing is claimed from now on; one that runs stops with its hold, below.
            for schedule in all.iter().filter_map(|a| a.schedule.as_ref()) {
                schedule.stop();
            }
            (
                all.iter()
                    .filter_map(|a| a.exec.as_ref().map(Exec::handle))
                    .collect(),
                all.iter()
                    .filter_map(|a| a.hooks.as_ref().map(Hooks::handle))
                    .collect(),
                all.iter().map(|a| a.holds.clone()).collect(),
            )
        };
        for h in hooks {
            h.exiting();
        }
        futures_util::future::join(
            futures_util::future::join_all(drains.iter().map(|x| x.drain_for_exit())),
            futures_util::future::join_all(holds.iter().map(|h| h.drain_for_exit())),
        )
        .await;
    }

    /// After the loop: waits until every child is gone and every hook run is over.
    async fn finish(&self) {
        let all = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        futures_util::future::join_all(all.into_iter().map(|a| async move {
            if let Some(x) = a.exec {
                x.finish().await;
            }
            if let Some(h) = a.hooks {
                h.finish().await;
            }
            if let Some(s) = a.schedule {
                s.finish().await;
            }
        }))
        .await;
    }
}

/// One election of a group beside the default one, as built.
struct ExtraElection {
    group: String,
    handle: ElectionHandle,
    /// Its store's boot counter, for the ids of its events.
    boot: u64,
    observers: crate::observer_table::Observers,
}

impl ExtraElection {
    /// What the API reaches it by. `--exec` and `--on-change` follow the default group only.
    /// `commands` is the sender the API commands it through (the `--exec` gate, when it runs a
    /// child) and `hooks` its `--on-change`, if it runs one.
    fn api(
        self,
        node_id: &str,
        (commands, hooks, holds, schedule): (
            mpsc::Sender<Command>,
            Option<crate::hooks::HooksHandle>,
            crate::jobs::Holds,
            Option<crate::schedule::ScheduleHandle>,
        ),
        health: Option<crate::health_check::HealthHandle>,
    ) -> ElectionApi {
        let ElectionHandle {
            snapshot,
            maintenance,
            ..
        } = self.handle;
        let run = event_run(&format!("{node_id}/{}", self.group), self.boot);
        ElectionApi {
            group: self.group,
            scheduler: crate::scheduled::Scheduler::start(
                snapshot.clone(),
                commands.clone(),
                holds.clone(),
            ),
            events: EventSource::lazy(snapshot.clone(), run),
            snapshot,
            commands,
            maintenance,
            hooks,
            health,
            observers: self.observers,
            reads: Default::default(),
            holds,
            schedule,
        }
    }
}

/// The elections of `groups` (beside the default one), each from the state its own directory
/// holds, added to `runtime`.
fn extra_elections(
    config: &NodeConfig,
    groups: &[String],
    runtime: &mut Runtime,
    (seed, beat): (u64, Instant),
    book: &Mutex<Book>,
) -> Result<Vec<ExtraElection>, RunError> {
    let mut built = Vec::with_capacity(groups.len());
    for group in groups {
        let (parts, boot) = group_election(config, group, (seed, beat), book, false)?;
        let observers = parts.observers.clone();
        let handle = runtime.add_election(parts);
        built.push(ExtraElection {
            group: group.clone(),
            handle,
            boot,
            observers,
        });
    }
    if !built.is_empty() {
        tracing::info!(
            groups = groups.len() + 1,
            default = %config.group,
            "taking part in several elections"
        );
    }
    Ok(built)
}

/// What the election of `group` (not the default one) is made of in this run: its term, vote
/// and promise from the book, its history from its directory, and the boot counter its
/// sequence numbers start from (the run's, or with `fresh_boot` a new one, kept in the book
/// before this returns: an election added while the node runs must number its messages above
/// any earlier election of the group in this run).
fn group_election(
    config: &NodeConfig,
    group: &str,
    (seed, beat): (u64, Instant),
    book: &Mutex<Book>,
    fresh_boot: bool,
) -> Result<(ElectionParts, u64), RunError> {
    let (persistent, boot) = {
        let mut book = book.lock().unwrap_or_else(|e| e.into_inner());
        let boot = if fresh_boot {
            let boot = book.next_boot();
            book.write()?;
            boot
        } else {
            book.boot()
        };
        (book.get(group), boot)
    };
    let mut loaded = Store::for_group(&group_dir(&config.data_dir, group), boot)?;
    loaded.persistent = persistent;
    let seed = seed ^ u64::from(crate::election::cksum(group.as_bytes()));
    let node = core_of(
        config,
        group,
        group_priority(config, group),
        &loaded,
        (seed, beat),
    );
    let parts = ElectionParts {
        group: group.to_string(),
        node,
        store: loaded.store,
        keeps: Keeps::Book,
        history: loaded.history,
        observers: ObserverTable::shared(),
        firing: loaded.firing,
        scheduled: Acting::scheduled(config, group),
    };
    Ok((parts, loaded.boot))
}

/// The groups an operator added while the node ran, less those the configuration now names.
fn added_groups(config: &NodeConfig, store: &Store) -> Result<Vec<String>, RunError> {
    let configured = |g: &String| *g == config.group || config.extra_groups.contains(g);
    Ok(store
        .added_groups()?
        .into_iter()
        .filter(|g| !configured(g))
        .collect())
}

/// The groups added while the node runs, and how to command each (for the health verdicts).
struct Added {
    groups: Vec<String>,
    commands_of: BTreeMap<String, mpsc::Sender<Command>>,
}

/// Adds and removes the elections of a running node (`POST /groups`, `DELETE /groups/{group}`):
/// it makes an election as start-up does, hands it to the loop, and keeps the list of added
/// groups in the default group's directory. One change at a time.
struct GroupMaker {
    config: NodeConfig,
    seed: u64,
    /// The process's beat (rule 18): an added group heartbeats with the others.
    beat: Instant,
    /// The persisted state of every group beside the default one.
    book: Arc<Mutex<Book>>,
    changes: mpsc::Sender<GroupChange>,
    every: EveryElection,
    health: Option<crate::health_check::HealthHandle>,
    /// Where an added group's `--exec` and `--on-change` go, for the exit.
    actors: Actors,
    metrics: Arc<Metrics>,
    /// The default group's store, where `groups.json` lives.
    store: Store,
    state: tokio::sync::Mutex<Added>,
}

impl GroupMaker {
    fn configured(&self, group: &str) -> bool {
        group == self.config.group || self.config.extra_groups.iter().any(|g| g == group)
    }

    async fn save(&self, groups: Vec<String>) -> Result<(), GroupRefusal> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.save_added_groups(&groups))
            .await
            .expect("the groups write does not panic")
            .map_err(|e| GroupRefusal::Storage(e.to_string()))
    }

    async fn add_group(&self, group: &str) -> Result<ElectionApi, GroupRefusal> {
        let mut added = self.state.lock().await;
        if self.configured(group) || added.groups.iter().any(|g| g == group) {
            return Err(GroupRefusal::Exists(group.to_string()));
        }
        let count = 1 + self.config.extra_groups.len() + added.groups.len();
        if count >= self.config.max_groups {
            return Err(GroupRefusal::TooMany {
                max: self.config.max_groups,
            });
        }
        let (config, name) = (self.config.clone(), group.to_string());
        let (seed, book) = ((self.seed, self.beat), self.book.clone());
        let (parts, boot) =
            tokio::task::spawn_blocking(move || group_election(&config, &name, seed, &book, true))
                .await
                .expect("making an election does not panic")
                .map_err(|e| GroupRefusal::Storage(e.to_string()))?;
        let mut groups = added.groups.clone();
        groups.push(group.to_string());
        self.save(groups.clone()).await?;
        let observers = parts.observers.clone();
        let (reply, answer) = oneshot::channel();
        let (_, report_changes) = Acting::wanted(&self.config, group);
        let change = GroupChange::Add {
            parts: Box::new(parts),
            report_changes,
            reply,
        };
        let added_now = match self.changes.send(change).await {
            Ok(()) => answer.await.map_err(|_| GroupRefusal::Stopped),
            Err(_) => Err(GroupRefusal::Stopped),
        };
        let (handle, changes) = match added_now {
            Ok(h) => h,
            Err(e) => {
                // Not running here: not kept either.
                let _ = self.save(added.groups.clone()).await;
                return Err(e);
            }
        };
        added.groups = groups;
        added
            .commands_of
            .insert(group.to_string(), handle.commands.clone());
        self.every.add(handle.commands.clone());
        if let Some(h) = &self.health {
            // A new election starts unhealthy when a check runs (rule 17): it takes the
            // node's current verdict at once instead of waiting for the next change.
            let healthy = h.status().healthy;
            let (reply, answer) = oneshot::channel();
            let input = crate::election::Input::SetHealth { healthy };
            if handle.commands.send(Command { input, reply }).await.is_ok() {
                let _ = answer.await;
            }
        }
        let (acting, guards, commands) = Acting::start(
            &self.config,
            group,
            (
                &handle.snapshot,
                handle.commands.clone(),
                handle.firings.clone(),
            ),
            changes,
            &self.metrics,
        );
        for guard in guards {
            let (reply, answer) = oneshot::channel();
            let change = GroupChange::Guard {
                group: group.to_string(),
                guard,
                reply,
            };
            if self.changes.send(change).await.is_ok() {
                let _ = answer.await;
            }
        }
        let acts = (
            commands,
            acting.hooks.as_ref().map(Hooks::handle),
            acting.holds.clone(),
            acting.schedule.as_ref().map(Schedule::handle),
        );
        self.actors.add(acting);
        let extra = ExtraElection {
            group: group.to_string(),
            handle,
            boot,
            observers,
        };
        Ok(extra.api(&self.config.node_id, acts, self.health.clone()))
    }

    async fn remove_group(&self, group: &str) -> Result<(), GroupRefusal> {
        let mut added = self.state.lock().await;
        if self.configured(group) {
            return Err(GroupRefusal::Configured(group.to_string()));
        }
        if !added.groups.iter().any(|g| g == group) {
            return Err(GroupRefusal::Unknown(group.to_string()));
        }
        let groups: Vec<String> = added
            .groups
            .iter()
            .filter(|g| *g != group)
            .cloned()
            .collect();
        self.save(groups.clone()).await?;
        let (reply, answer) = oneshot::channel();
        let change = GroupChange::Remove {
            group: group.to_string(),
            reply,
        };
        self.changes
            .send(change)
            .await
            .map_err(|_| GroupRefusal::Stopped)?;
        answer.await.map_err(|_| GroupRefusal::Stopped)?;
        added.groups = groups;
        if let Some(commands) = added.commands_of.remove(group) {
            self.every.remove(&commands);
        }
        Ok(())
    }
}

impl GroupControl for GroupMaker {
    fn add<'a>(&'a self, group: &'a str) -> GroupFuture<'a, ElectionApi> {
        Box::pin(self.add_group(group))
    }

    fn remove<'a>(&'a self, group: &'a str) -> GroupFuture<'a, ()> {
        Box::pin(self.remove_group(group))
    }
}

/// Where the state of `group` (not the default one) lives: a directory of its own, so that the
/// default group's files stay where a node of one election keeps them.
pub fn group_dir(data_dir: &std::path::Path, group: &str) -> PathBuf {
    data_dir.join("groups").join(group)
}

/// This node's priority in `group`: `--priority` if given, else the first four bytes of the
/// SHA-256 of `<group>/<node-id>`, a rank of its own per group and node (the default group
/// keeps the checksum of the id alone, as a node of one election has it). Not the checksum:
/// CRC-32 is linear, so the order of two nodes' checksums follows one bit of the group's, and
/// of three nodes `n1..n3` one led 511 of 999 groups; SHA-256 gives 328, 332 and 339.
pub fn group_priority(config: &NodeConfig, group: &str) -> u32 {
    use sha2::{Digest, Sha256};
    if !config.spread_priorities || group == config.group {
        return config.priority;
    }
    let digest = Sha256::digest(format!("{group}/{}", config.node_id).as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// This node's timings in `group`: the configured ones, but for every group beside the default
/// one a preemption wait of `P` plus a share of `P` of its own (from the SHA-256 of
/// `<group>/<node-id>`, as its rank), between `P` and `2P`. A node that comes back steady and
/// ranks first in a third of a thousand groups is then handed them back spread over `P`, not in
/// one instant (about 67 handovers a second at the defaults, none of them in a burst), and a
/// leader's preemption, which no rule reads but the leader's own wait (rule 12), never comes
/// sooner than the configured `P`. Zero (no preemption) stays zero.
pub fn group_timings(config: &NodeConfig, group: &str) -> crate::election::Timings {
    use sha2::{Digest, Sha256};
    let mut t = config.timings;
    if group == config.group || t.preempt_after.is_zero() {
        return t;
    }
    let digest = Sha256::digest(format!("{group}/{}", config.node_id).as_bytes());
    let share = u32::from_be_bytes([digest[4], digest[5], digest[6], digest[7]]);
    let extra = t
        .preempt_after
        .mul_f64(f64::from(share) / (f64::from(u32::MAX) + 1.0));
    // Whole milliseconds, as every timing is.
    t.preempt_after += std::time::Duration::from_millis(extra.as_millis() as u64);
    t
}

/// The election core of the default group, from the configuration and what the data directory
/// held.
fn core(config: &NodeConfig, loaded: &Loaded, seed: u64, beat: Instant) -> Node {
    core_of(config, &config.group, config.priority, loaded, (seed, beat))
}

/// The election core of `group` in this run, on the process's beat.
fn core_of(
    config: &NodeConfig,
    group: &str,
    priority: u32,
    loaded: &Loaded,
    (seed, beat): (u64, Instant),
) -> Node {
    Node::new(
        Config {
            node_id: config.node_id.clone(),
            group: group.to_string(),
            members: config.members.clone(),
            priority,
            eligible: config.eligible,
            // With a check, unhealthy until it first passes (rule 17).
            healthy: config.health_check.is_none(),
            timings: group_timings(config, group),
            beat: Some(beat),
        },
        loaded.persistent.clone(),
        crate::clock::now(),
        seed,
        store::first_seq(loaded.boot),
    )
}

/// Names this run of this node among every run of every member, for the ids of its events: a
/// watcher that moves to another member, or reconnects after a restart, cannot resume from the
/// new log by mistake.
fn event_run(node_id: &str, boot: u64) -> String {
    let started = crate::clock::wall::unix_ms_now();
    format!(
        "{:08x}{boot:x}{started:x}",
        crate::election::cksum(node_id.as_bytes())
    )
}

impl BuiltNode {
    /// The API of this node.
    pub fn router(&self) -> Router {
        crate::api::router(self.state.clone())
    }

    /// Serves the API on `listeners` and runs the election until `shutdown` resolves (then
    /// hands over leadership if it has it) or the election loop fails. An `Err` means the process
    /// must exit non-zero.
    pub async fn serve(
        self,
        listeners: impl Into<Listeners>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RunError> {
        let listeners = listeners.into();
        // The SIGHUP handler is in place before the node serves, so a reload asked for once it
        // answers never ends the process.
        let _stop_watch = self.tls.as_ref().map(|tls| {
            let stop = CancellationToken::new();
            tls.watch(stop.clone());
            stop.drop_guard()
        });
        tracing::info!(
            tls = self.tls.as_ref().is_some_and(|t| t.server_config().is_some()),
            client_certificates = self.tls.as_ref().is_some_and(|t| t.requires_client_certs()),
            listen = %listeners.api.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            peer_listen = %listeners.peer.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.to_string()).unwrap_or_default(),
            "serving"
        );
        let _stop_transport = self.transport_stop.drop_guard();
        let stop = CancellationToken::new();
        let stop_loop = stop.clone();
        let actors = self.actors.clone();
        tokio::spawn(async move {
            shutdown.await;
            crate::notify::stopping();
            // Every hook run ends within its share of the exit budget from now on, and every
            // child stops before a leader hands over (its successor may lead at once).
            actors.exiting().await;
            stop_loop.cancel();
        });
        let mut first_view = self.state.elections.default().snapshot.clone();
        let mut loop_task = tokio::spawn(self.runtime.run(stop));
        let metrics = self.state.metrics.clone();
        let server_done = CancellationToken::new();
        let server = tokio::spawn(crate::server::serve(
            listeners,
            crate::api::router(self.state),
            self.peer_routes,
            self.limits,
            self.tls,
            metrics,
            server_done.clone(),
        ));
        // systemd's READY=1 once the loop has published its first view (the server's listeners
        // were bound before this function, its task is spawned above).
        tokio::spawn(async move {
            if first_view.changed().await.is_ok() {
                crate::notify::ready();
            }
        });
        let loop_result = (&mut loop_task).await;
        server_done.cancel();
        // No check runs once the loop is gone: nothing would take its verdict.
        if let Some(h) = self.health {
            h.finish().await;
        }
        // Open event streams end with the loop; give other requests a moment, then stop anyway.
        let _ = tokio::join!(
            tokio::time::timeout(exit_budget::SERVER_CLOSE, server),
            self.actors.finish()
        );
        match loop_result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(RunError::LoopDied(e.to_string())),
        }
    }
}

/// Rule 1 (docs/protocol.md): quorums of member sets at most one id apart intersect; of sets
/// further apart they may not. An operator who restarts a node with a set two ids away from the
/// one it ran with (two changes at once, or a stale configuration) could let two groups elect,
/// so start-up refuses it unless told that the whole cluster is being re-formed.
fn check_member_change(store: &Store, members: &MemberSet, accept: bool) -> Result<(), RunError> {
    if let Some(previous) = store.last_members()? {
        let difference: Vec<String> = members
            .difference(&previous)
            .into_iter()
            .map(str::to_string)
            .collect();
        if difference.len() > 1 {
            let previous = previous.into_iter().collect::<Vec<_>>().join(", ");
            if !accept {
                return Err(RunError::MemberChange {
                    previous,
                    configured: members.ids().collect::<Vec<_>>().join(", "),
                    difference,
                });
            }
            tracing::warn!(
                previous,
                configured = %members,
                "member set changed by more than one id, accepted by --accept-member-change"
            );
        } else if !difference.is_empty() {
            tracing::info!(changed = %difference.join(", "), configured = %members, "member set changed by one id");
        }
    }
    store.save_members(members)?;
    Ok(())
}

/// Runs one node on `listeners` (a `TcpListener`, or the API's and the peers') until
/// `shutdown` resolves (then hands over leadership if it has it) or the election loop fails.
/// An `Err` means the process must exit non-zero.
pub async fn run(
    mut config: NodeConfig,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    // The process's open-file limit, raised to its hard limit; caps that do not fit are lowered.
    crate::open_files::prepare(&mut config.limits, config.transport.open_files());
    NodeBuilder::new(config)
        .build()?
        .serve(listeners, shutdown)
        .await
}

/// `run --observe`, already validated: what the observer follows, and how its API is served.
#[derive(Debug, Clone)]
pub struct ObserverNodeConfig {
    pub observer: ObserverConfig,
    /// Connection caps and timeouts of its HTTP server.
    pub limits: Limits,
    /// `--tls-cert` and friends for its own API; `None` is plain HTTP.
    pub tls: Option<Arc<Tls>>,
    /// `--on-change`: run on every change of the leader it knows (role `observer`).
    pub on_change: Option<HookConfig>,
}

/// Runs an observer on `listeners` until `shutdown` resolves: it follows the election
/// ([`crate::observer`]) and serves the read API from what it knows. Its API refuses every
/// command, and it never answers 200 on `/role/leader`.
pub async fn run_observer(
    mut config: ObserverNodeConfig,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    crate::open_files::prepare(&mut config.limits, 0);
    let listeners = listeners.into();
    let o = &config.observer;
    let (node_id, group, timings) = (o.node_id.clone(), o.follows.clone(), o.timings);
    tracing::info!(
        node = %node_id,
        members = %o.members,
        transport = o.transport_kind(),
        verified = o.cluster_keys.is_some(),
        "observer starting: it follows the election without a vote"
    );
    let metrics = Arc::new(Metrics::new());
    let observer = Observer::start(config.observer.clone(), metrics.clone())?;
    let hooks = config.on_change.clone().map(|h| {
        let who = (node_id.clone(), group.clone());
        Hooks::start(h, observer.changes.clone(), who, timings, metrics.clone())
    });
    // Nothing takes commands: the observer's router refuses them before any would be sent.
    let (commands, _) = mpsc::channel(1);
    let (maintenance, _) = mpsc::channel(1);
    let snapshot = observer.snapshot.clone();
    let started = crate::clock::wall::unix_ms_now() / 1000;
    let events = EventSource::eager(snapshot.clone(), event_run(&node_id, started));
    // Never granted: the observer's router refuses holds.
    let holds = crate::jobs::Holds::new(&timings);
    let scheduler =
        crate::scheduled::Scheduler::start(snapshot.clone(), commands.clone(), holds.clone());
    let election = ElectionApi {
        group: group.clone(),
        scheduler,
        snapshot,
        commands,
        maintenance,
        events,
        hooks: hooks.as_ref().map(Hooks::handle),
        health: None,
        observers: ObserverTable::shared(),
        reads: Default::default(),
        holds,
        schedule: None,
    };
    let state = AppState::new(AppParts {
        elections: Elections::new(election, Vec::new()),
        groups: None,
        tls: config.tls.clone(),
        ingress: None,
        last_turn: observer.clock.clone(),
        metrics: metrics.clone(),
        metrics_groups: None,
        auth: Arc::new(Auth {
            token: None,
            allow_unauthenticated: false,
        }),
        subscribers: Subscribers::new(config.limits.max_event_subscribers),
        observing: Some(observer.observing.clone()),
    });
    let _stop_watch = config.tls.as_ref().map(|tls| {
        let stop = CancellationToken::new();
        tls.watch(stop.clone());
        stop.drop_guard()
    });
    tracing::info!(
        listen = %listeners.api.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        "serving"
    );
    let server_done = CancellationToken::new();
    let server = tokio::spawn(crate::server::serve(
        listeners,
        crate::api::router(state),
        PeerRoutes(&[]),
        config.limits,
        config.tls,
        metrics,
        server_done.clone(),
    ));
    crate::notify::ready();
    shutdown.await;
    crate::notify::stopping();
    tracing::info!("observer stopping");
    server_done.cancel();
    if let Some(h) = &hooks {
        h.handle().exiting();
    }
    let _ = tokio::join!(
        tokio::time::timeout(exit_budget::SERVER_CLOSE, server),
        observer.finish(),
        async {
            if let Some(h) = hooks {
                h.finish().await;
            }
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A data directory of its own under the system's temp dir, removed at the end.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "pe-builder-{tag}-{}-{}",
                std::process::id(),
                crate::clock::wall::unix_ms_now()
            ));
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn set(ids: &[&str]) -> MemberSet {
        MemberSet::new(ids[0], ids.iter().copied()).unwrap()
    }

    fn check(dir: &Dir, ids: &[&str], accept: bool) -> Result<(), RunError> {
        let store = Store::open(&dir.0, false).unwrap().store;
        check_member_change(&store, &set(ids), accept)
    }

    #[test]
    fn each_group_ranks_the_nodes_its_own_way_and_the_leaders_spread() {
        let config = |id: &str, spread: bool| NodeConfig {
            spread_priorities: spread,
            ..minimal(id)
        };
        let nodes = ["n1", "n2", "n3"];
        let mut led = [0usize; 3];
        for i in 1..1000 {
            let group = format!("shard-{i:04}");
            let p = nodes.map(|n| group_priority(&config(n, true), &group));
            let top = (0..3).max_by_key(|k| p[*k]).unwrap();
            led[top] += 1;
        }
        // 999 groups: each node leads about a third (a third is 333; the checksum gave 511).
        assert!(led.iter().all(|n| (280..390).contains(n)), "{led:?}");
        // The default group keeps the node's own priority; --priority holds in every group.
        let c = config("n1", true);
        assert_eq!(group_priority(&c, &c.group), c.priority);
        let fixed = config("n1", false);
        assert_eq!(group_priority(&fixed, "shard-0001"), fixed.priority);
    }

    #[test]
    fn each_groups_preemption_wait_is_spread_over_p_and_never_below_it() {
        let c = minimal("n1");
        let p = c.timings.preempt_after;
        assert!(!p.is_zero());
        let waits: Vec<Duration> = (1..1000)
            .map(|i| group_timings(&c, &format!("shard-{i:04}")).preempt_after)
            .collect();
        assert!(waits.iter().all(|w| *w >= p && *w < 2 * p), "{waits:?}");
        // Spread over the whole of [P, 2P): each fifth of it holds about a fifth of the groups.
        let mut fifths = [0usize; 5];
        for w in &waits {
            fifths[((*w - p).as_secs_f64() / p.as_secs_f64() * 5.0) as usize] += 1;
        }
        assert!(fifths.iter().all(|n| (150..250).contains(n)), "{fifths:?}");
        // Each a whole number of milliseconds; the rest of the timings as configured.
        let t = group_timings(&c, "shard-0001");
        assert_eq!(t.preempt_after.subsec_nanos() % 1_000_000, 0);
        assert_eq!(
            (t.heartbeat, t.lease, t.election_timeout),
            (
                c.timings.heartbeat,
                c.timings.lease,
                c.timings.election_timeout
            )
        );
        // The default group keeps P; no preemption stays none.
        assert_eq!(group_timings(&c, &c.group), c.timings);
        let mut off = minimal("n1");
        off.timings.preempt_after = Duration::ZERO;
        assert!(group_timings(&off, "shard-0001").preempt_after.is_zero());
    }

    /// A node's configuration with nothing configured but its id.
    fn minimal(id: &str) -> NodeConfig {
        NodeConfig {
            node_id: id.into(),
            group: crate::group::DEFAULT_GROUP.into(),
            extra_groups: Vec::new(),
            spread_priorities: false,
            max_groups: crate::group::DEFAULT_MAX_GROUPS,
            transport: TransportConfig::Http { peers: Vec::new() },
            members: set(&[id]),
            priority: crate::election::default_priority(id),
            eligible: true,
            data_dir: std::env::temp_dir(),
            timings: Timings::default(),
            admin_token: None,
            allow_unauthenticated: false,
            reset_state: false,
            accept_member_change: false,
            cluster_keys: None,
            limits: Limits::default(),
            exec: None,
            exec_groups: Default::default(),
            schedule: None,
            on_change_groups: Default::default(),
            metrics_groups: None,
            on_change: None,
            health_check: None,
            info: None,
            tls: None,
        }
    }

    /// The events transport hears reports, not messages, and sends nothing: a member on it
    /// could never elect, so it is refused before anything is opened or written.
    #[test]
    fn a_member_on_the_events_transport_is_refused() {
        let dir = Dir::new("events");
        let mut c = minimal("n1");
        c.data_dir = dir.0.clone();
        c.transport = TransportConfig::Events(transport::events::EventsConfig {
            members: Vec::new(),
            node_id: "n1".into(),
            group: None,
            http: None,
        });
        let e = NodeBuilder::new(c).build().err().expect("refused");
        assert!(
            matches!(e, RunError::Transport(StartError::ObserverOnly)),
            "{e}"
        );
        assert!(e.to_string().contains("observer's"), "{e}");
        assert!(!dir.0.exists(), "nothing is written for a refused node");
    }

    #[test]
    fn one_member_at_a_time_is_accepted_and_recorded() {
        let dir = Dir::new("one");
        check(&dir, &["a", "b", "c"], false).expect("a new node takes any set");
        check(&dir, &["a", "b", "c", "d"], false).expect("one added");
        check(&dir, &["a", "c", "d"], false).expect("one removed");
        let store = Store::open(&dir.0, false).unwrap().store;
        let last = store.last_members().unwrap().unwrap();
        assert_eq!(last.into_iter().collect::<Vec<_>>(), ["a", "c", "d"]);
    }

    #[test]
    fn two_ids_at_once_are_refused_unless_accepted() {
        let dir = Dir::new("two");
        check(&dir, &["a", "b", "c"], false).unwrap();
        // A replacement in one step: b out, e in.
        match check(&dir, &["a", "c", "e"], false) {
            Err(e @ RunError::MemberChange { .. }) => {
                let text = e.to_string();
                assert!(text.contains("{a, b, c}"), "{text}");
                assert!(text.contains("by 2 ids (b, e)"), "{text}");
                assert!(text.contains("--accept-member-change"), "{text}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let store = Store::open(&dir.0, false).unwrap().store;
        let kept: Vec<String> = store.last_members().unwrap().unwrap().into_iter().collect();
        assert_eq!(kept, ["a", "b", "c"], "a refused set is not recorded");
        check(&dir, &["a", "c", "e"], true).expect("accepted on purpose");
        check(&dir, &["a", "c", "e", "f"], false).expect("and the next step counts from it");
    }

    #[test]
    fn a_damaged_members_file_stops_start_up() {
        let dir = Dir::new("bad");
        check(&dir, &["a", "b"], false).unwrap();
        std::fs::write(dir.0.join(store::MEMBERS_FILE), b"{not json").unwrap();
        let e = check(&dir, &["a", "b"], false).unwrap_err();
        assert!(e.to_string().contains(store::MEMBERS_FILE), "{e}");
    }
}
