//! One way to assemble a node: data dir → core → transport → runtime → API state. The binary,
//! the tests and the benchmarks all build nodes here, so protocol details (the sequence-number
//! epoch, the seed) live in one place and the transport is just a parameter.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::api::{AppParts, AppState, Auth, Subscribers};
use crate::election::{Config, MemberSet, Node, NodeInfo, Timings};
use crate::exec::{Exec, ExecConfig};
use crate::exit_budget;
use crate::health_check::{HealthCheckConfig, HealthChecks};
use crate::hooks::{HookConfig, Hooks};
use crate::metrics::Metrics;
use crate::observer::{Observer, ObserverConfig, Source as ObserverSource};
use crate::observer_table::ObserverTable;
use crate::runtime::{Command, Runtime, RuntimeError, Snapshot, Wiring};
use crate::server::{Limits, Listeners, PeerRoutes};
use crate::signing::KeyRing;
use crate::store::{self, Loaded, Store, StoreError};
use crate::tls::Tls;
use crate::transport::{
    self, Inbound, Ingress, StartError, Started, Transport, TransportConfig, INBOUND_CAPACITY,
};

/// Everything one node needs, already validated.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: String,
    pub group: String,
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
    /// `--on-change`: a command to run on every change of the leader or of this node's role.
    pub on_change: Option<HookConfig>,
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
         {{{configured}}} differs from it by {} ids ({}). Change one member at a time (README, \
         \"Changing the members\"): member sets two ids apart may not share a quorum, so both \
         could elect a leader. To re-form the cluster on purpose, with every node stopped, start \
         each node once with --accept-member-change",
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
    /// The `--exec` supervisor, if any.
    exec: Option<Exec>,
    /// The `--on-change` task, if any.
    hooks: Option<Hooks>,
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
        let loaded = Store::open(&config.data_dir, config.reset_state)?;
        if config.reset_state {
            tracing::warn!(dir = %config.data_dir.display(), "state reset by --reset-state: starting at term 0");
        }
        check_member_change(&loaded.store, &config.members, config.accept_member_change)?;
        let seed = self.seed.unwrap_or_else(|| {
            crate::clock::wall::unix_ms_now() ^ (u64::from(std::process::id()) << 32)
        });
        let node = core(&config, &loaded, seed);
        let metrics = Arc::new(Metrics::new());
        let (in_tx, in_rx) = mpsc::channel(INBOUND_CAPACITY);
        let transport_stop = CancellationToken::new();
        let Started { transport, ingress } = match self.transport {
            // A test's stand-in for the http transport (a memory bus, a faulty link): its node
            // takes `POST /peer/messages` as an http node does.
            Some(make) => Started {
                transport: make(in_tx.clone(), metrics.clone(), transport_stop.clone()),
                ingress: Some(transport::http::ingress(in_tx.clone(), metrics.clone())),
            },
            None => config.transport.start(transport::Start {
                inbound: in_tx,
                metrics: metrics.clone(),
                stop: transport_stop.clone(),
                quorum: config.members.quorum(),
                tls: config.tls.clone(),
            })?,
        };
        let (cmd_tx, cmd_rx) = mpsc::channel(64);
        let (maintenance_tx, maintenance_rx) = mpsc::channel(8);
        let observers = ObserverTable::shared();
        let (mut runtime, snapshot, last_turn) = Runtime::new(
            node,
            loaded.store,
            loaded.history,
            Wiring {
                transport,
                keys: config.cluster_keys.clone(),
                inbound: in_rx,
                commands: cmd_rx,
                metrics: metrics.clone(),
                group: config.group.clone(),
                info: config.info.clone(),
                maintenance: maintenance_rx,
                observers: observers.clone(),
            },
        );
        tracing::info!(
            node = %config.node_id,
            term = loaded.persistent.term,
            boot = loaded.boot,
            members = %config.members,
            quorum = config.members.quorum(),
            "node starting"
        );
        let Companions {
            exec,
            hooks,
            health,
        } = Companions::start(&config, &mut runtime, &snapshot, &cmd_tx, &metrics);
        let commands = match &exec {
            Some(x) => x.gate(cmd_tx, snapshot.clone()),
            None => cmd_tx,
        };
        let events =
            crate::api::start_event_log(snapshot.clone(), event_run(&config.node_id, loaded.boot));
        let scheduler = crate::scheduled::Scheduler::start(snapshot.clone(), commands.clone());
        let state = AppState::new(AppParts {
            tls: config.tls.clone(),
            scheduler,
            snapshot,
            commands,
            maintenance: maintenance_tx,
            ingress: ingress.as_ref().map(|i| i.router.clone()),
            last_turn,
            metrics,
            auth: Arc::new(Auth {
                token: config.admin_token.clone(),
                allow_unauthenticated: config.allow_unauthenticated,
            }),
            subscribers: Subscribers::new(config.limits.max_event_subscribers),
            events,
            hooks: hooks.as_ref().map(Hooks::handle),
            health: health.as_ref().map(HealthChecks::handle),
            observers,
            observing: None,
        });
        Ok(BuiltNode {
            runtime,
            state,
            limits: config.limits,
            tls: config.tls,
            peer_routes: PeerRoutes(ingress.map_or(&[], |i: Ingress| i.routes)),
            exec,
            hooks,
            health,
            transport_stop,
        })
    }
}

/// What runs beside the election loop, each only when configured: `--exec`, the
/// `--on-change` hook and the health checks.
struct Companions {
    exec: Option<Exec>,
    hooks: Option<Hooks>,
    health: Option<HealthChecks>,
}

impl Companions {
    fn start(
        config: &NodeConfig,
        runtime: &mut Runtime,
        snapshot: &watch::Receiver<Snapshot>,
        commands: &mpsc::Sender<Command>,
        metrics: &Arc<Metrics>,
    ) -> Companions {
        // With --exec, handovers asked through the API wait for the child to stop (see `exec`).
        let exec = (config.exec.clone())
            .map(|e| Exec::start(e, snapshot.clone(), commands.clone(), metrics.clone()));
        if let Some(x) = &exec {
            runtime.guard_releases(x.handle().release_guard(config.timings));
        }
        // With --on-change, a resign also waits for the run that reports the end of leadership.
        let hooks = config.on_change.clone().map(|h| {
            let changes = runtime.report_changes();
            let who = (config.node_id.clone(), config.group.clone());
            Hooks::start(h, changes, who, config.timings, metrics.clone())
        });
        if let Some(h) = &hooks {
            runtime.guard_releases(h.handle().release_guard());
        }
        // Verdicts go straight to the loop: a handover they cause waits for the release guards
        // above, like any resign.
        let health = (config.health_check.clone())
            .map(|h| HealthChecks::start(h, commands.clone(), metrics.clone()));
        Companions {
            exec,
            hooks,
            health,
        }
    }
}

/// The election core of this run, from the configuration and what the data directory held.
fn core(config: &NodeConfig, loaded: &Loaded, seed: u64) -> Node {
    Node::new(
        Config {
            node_id: config.node_id.clone(),
            group: config.group.clone(),
            members: config.members.clone(),
            priority: config.priority,
            eligible: config.eligible,
            // With a check, unhealthy until it first passes (rule 17).
            healthy: config.health_check.is_none(),
            timings: config.timings,
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
        let exec_drain = self.exec.as_ref().map(Exec::handle);
        let hooks_exit = self.hooks.as_ref().map(Hooks::handle);
        tokio::spawn(async move {
            shutdown.await;
            crate::notify::stopping();
            // From now on every hook run ends within its share of the exit budget.
            if let Some(h) = hooks_exit {
                h.exiting();
            }
            // The child stops before a leader hands over (its successor may lead at once).
            if let Some(x) = exec_drain {
                x.drain_for_exit().await;
            }
            stop_loop.cancel();
        });
        let mut first_view = self.state.snapshot.clone();
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
        let (exec, hooks) = (self.exec, self.hooks);
        let _ = tokio::join!(
            tokio::time::timeout(exit_budget::SERVER_CLOSE, server),
            async {
                if let Some(x) = exec {
                    x.finish().await;
                }
            },
            async {
                if let Some(h) = hooks {
                    h.finish().await;
                }
            }
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
    let (node_id, group, timings) = (o.node_id.clone(), o.group.clone(), o.timings);
    tracing::info!(
        node = %node_id,
        members = %o.members,
        transport = match &o.source {
            ObserverSource::Http { .. } => "http",
            ObserverSource::Pilot(_) => "pilot",
        },
        verified = o.cluster_keys.is_some(),
        "observer starting: it follows the election without a vote"
    );
    let metrics = Arc::new(Metrics::new());
    let observer = Observer::start(config.observer.clone(), metrics.clone());
    let hooks = config.on_change.clone().map(|h| {
        let who = (node_id.clone(), group.clone());
        Hooks::start(h, observer.changes.clone(), who, timings, metrics.clone())
    });
    // Nothing takes commands: the observer's router refuses them before any would be sent.
    let (commands, _) = mpsc::channel(1);
    let (maintenance, _) = mpsc::channel(1);
    let snapshot = observer.snapshot.clone();
    let started = crate::clock::wall::unix_ms_now() / 1000;
    let events = crate::api::start_event_log(snapshot.clone(), event_run(&node_id, started));
    let scheduler = crate::scheduled::Scheduler::start(snapshot.clone(), commands.clone());
    let state = AppState::new(AppParts {
        tls: config.tls.clone(),
        scheduler,
        snapshot,
        commands,
        maintenance,
        ingress: None,
        last_turn: observer.clock.clone(),
        metrics: metrics.clone(),
        auth: Arc::new(Auth {
            token: None,
            allow_unauthenticated: false,
        }),
        subscribers: Subscribers::new(config.limits.max_event_subscribers),
        events,
        hooks: hooks.as_ref().map(Hooks::handle),
        health: None,
        observers: ObserverTable::shared(),
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
