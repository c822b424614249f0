//! pilot-election: one coordinator for a cluster, automatic failover, no split brain.
//!
//! Layout:
//! - [`election`]: the deterministic sans-IO core (protocol state machine, wire messages,
//!   timings, default priority).
//! - [`sim`]: a seeded discrete-event simulator that runs whole clusters of cores through faults
//!   and checks the safety invariants after every step.
//! - [`signing`]: peer authentication (HMAC-SHA256 cluster keys with rotation) and replay windows.
//! - [`pilotctl`]: a typed async wrapper around the real `pilotctl` CLI (info, publish,
//!   subscribe, JSON error codes, process-group timeouts) for the pilot transport.
//! - [`runtime`]: the tokio task that drives the core: timers, messages, commands, durable state.
//! - [`store`]: the data directory (state file with term, vote and boot counter; history).
//! - [`transport`]: how messages leave and arrive (`http` built in, `memory` for tests).
//! - [`api`]: the HTTP API (`router(AppState)`), one file per resource.
//! - [`server`]: the HTTP server: accept loop, connection caps and timeouts, peer ingress.
//! - [`open_files`]: the open-file limit, raised at start, that the caps must fit in.
//! - [`metrics`]: Prometheus metrics shared by all of the above.
//! - [`cli`]: command-line parsing, the client commands and the demo; `main.rs` only dispatches.
//! - [`run`]: one node, from configuration to a serving process.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod election;
pub mod metrics;
pub mod open_files;
pub mod pilotctl;
pub mod runtime;
pub mod server;
pub mod signing;
pub mod sim;
pub mod store;
pub mod transport;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::{AppState, Auth, Subscribers};
use crate::election::{Config, Node, Timings};
use crate::metrics::Metrics;
use crate::runtime::{Runtime, RuntimeError, Wiring};
use crate::server::{Limits, Listeners};
use crate::store::{Store, StoreError};
use crate::transport::http::{HttpTransport, Peer};
use crate::transport::pilot::{PilotConfig, PilotTransport};
use crate::transport::{Transport, INBOUND_CAPACITY};

/// Everything one node needs, already validated.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: String,
    pub group: String,
    pub peers: Vec<Peer>,
    pub cluster_size: usize,
    pub priority: u32,
    pub eligible: bool,
    pub data_dir: PathBuf,
    pub timings: Timings,
    pub admin_token: Option<String>,
    pub allow_unauthenticated: bool,
    pub reset_state: bool,
    /// Elect over the Pilot overlay through pilotctl instead of the built-in http transport.
    pub pilot: Option<PilotConfig>,
    /// Cluster keys (`--cluster-key-file`); `None` leaves peers unauthenticated.
    pub cluster_keys: Option<signing::KeyRing>,
    /// Connection caps and timeouts of the HTTP server.
    pub limits: Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot start the HTTP transport: {0}")]
    Transport(String),
    #[error("the election loop died: {0}")]
    LoopDied(String),
}

/// Runs one node on `listeners` (a `TcpListener`, or the API's and the peers') until
/// `shutdown` resolves (then hands over leadership if it has it) or the election loop fails.
/// An `Err` means the process must exit non-zero.
pub async fn run(
    config: NodeConfig,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let listeners = listeners.into();
    let mut limits = config.limits.clone();
    open_files::prepare(&mut limits, config.peers.len());
    let loaded = Store::open(&config.data_dir, config.reset_state)?;
    if config.reset_state {
        tracing::warn!(dir = %config.data_dir.display(), "state reset by --reset-state: starting at term 0");
    }
    let now = tokio::time::Instant::now();
    let seed = store::unix_ms_now() ^ (u64::from(std::process::id()) << 32);
    let node = Node::new(
        Config {
            node_id: config.node_id.clone(),
            group: config.group.clone(),
            cluster_size: config.cluster_size,
            priority: config.priority,
            eligible: config.eligible,
            timings: config.timings,
        },
        loaded.persistent.clone(),
        now,
        seed,
        loaded.boot << 32,
    );
    let metrics = Arc::new(Metrics::new());
    let (in_tx, in_rx) = mpsc::channel(INBOUND_CAPACITY);
    // The transport outlives the loop's shutdown: a leader handing over must still hear its
    // successor win.
    let transport_stop = CancellationToken::new();
    let _stop_transport = transport_stop.clone().drop_guard();
    let transport: Arc<dyn Transport> = match &config.pilot {
        Some(pilot) => Arc::new(PilotTransport::start(
            pilot.clone(),
            in_tx.clone(),
            metrics.clone(),
            transport_stop,
        )),
        None => Arc::new(
            HttpTransport::start(
                config.peers.clone(),
                config.cluster_size,
                in_tx.clone(),
                metrics.clone(),
            )
            .map_err(|e| RunError::Transport(e.to_string()))?,
        ),
    };
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let (runtime, snapshot, clock) = Runtime::new(
        node,
        loaded.store,
        loaded.history,
        Wiring {
            transport,
            keys: config.cluster_keys.clone(),
            inbound: in_rx,
            commands: cmd_rx,
            metrics: metrics.clone(),
        },
    );
    tracing::info!(
        node = %config.node_id,
        term = loaded.persistent.term,
        boot = loaded.boot,
        cluster_size = config.cluster_size,
        listen = %listeners.api.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        peer_listen = %listeners.peer.as_ref().and_then(|l| l.local_addr().ok()).map(|a| a.to_string()).unwrap_or_default(),
        "node starting"
    );
    let state = AppState {
        snapshot,
        commands: cmd_tx,
        ingress: in_tx,
        clock,
        metrics: metrics.clone(),
        auth: Arc::new(Auth {
            token: config.admin_token.clone(),
            allow_unauthenticated: config.allow_unauthenticated,
        }),
        subscribers: Subscribers::new(limits.max_event_subscribers),
    };
    let stop = CancellationToken::new();
    let stop_loop = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        stop_loop.cancel();
    });
    let mut loop_task = tokio::spawn(runtime.run(stop));
    let server_done = CancellationToken::new();
    let server = tokio::spawn(server::serve(
        listeners,
        api::router(state),
        limits,
        metrics.clone(),
        server_done.clone(),
    ));
    let loop_result = (&mut loop_task).await;
    server_done.cancel();
    // Open event streams end with the loop; give other requests a moment, then stop anyway.
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    match loop_result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(RunError::LoopDied(e.to_string())),
    }
}
