//! pilot-election: one coordinator for a cluster, automatic failover, no split brain.
//!
//! Start with docs/architecture.md (the layers, one request and one peer message traced through
//! them) and docs/protocol.md (the rules the core keeps and why they are safe).
//!
//! Layout:
//! - [`election`]: the deterministic sans-IO core (state machine, membership, rank, wire
//!   messages, timings), its own crate `pilot-election-core` (`crates/core`), re-exported here.
//! - [`clock`]: the suspend-aware monotonic clock every protocol timer is measured on, and
//!   (`clock::wall`) the wall clock, for display only.
//! - [`runtime`]: the tokio task that drives the cores, one election per group
//!   (`runtime/election.rs`): timers, messages, commands, durable state, and the operator's
//!   maintenance pause it spreads (`runtime/maintenance.rs`, rule 16).
//! - [`group`]: election group names and the rule every name keeps.
//! - [`builder`]: assembles a node (store, core, transport, runtime, API state); used by the
//!   binary, the tests and the benchmarks.
//! - [`store`]: the data directory (state file with term, vote and boot counter; history; replay
//!   marks).
//! - [`directory`]: where each member's API is and its operator's labels, for clients (never
//!   read by the election).
//! - [`tls`]: rustls configurations for the listeners and the peer client, reloaded on SIGHUP.
//! - [`signing`]: peer authentication (HMAC-SHA256 cluster keys with rotation) and replay windows.
//! - [`transport`]: how messages leave and arrive (`http` built in, `pilot` through pilotctl,
//!   `memory` for tests).
//! - [`peer_client`]: the HTTP client the http transport reaches its peers with (timeouts, pool).
//! - [`pilotctl`]: a typed async wrapper around the real `pilotctl` CLI, for the pilot transport.
//! - [`api`]: the HTTP API (`router(AppState)`), one file per resource.
//! - [`server`]: the HTTP server around the router: connection caps, timeouts, the peers' own
//!   share; [`open_files`] raises the open-file limit it needs.
//! - [`exec`]: `run --exec`, a command that runs only while this node leads.
//! - [`hooks`]: `run --on-change`, a command every node runs when the leader or its role
//!   changes (a VIP, DNS, a load balancer), done before a leader's resign leaves.
//! - [`health_check`]: `run --health-cmd`/`--health-url`, the application's health, which
//!   leadership follows (rule 17).
//! - [`scheduled`]: step-downs scheduled for a later hour (`POST /step-down {"at": ...}`).
//! - [`backoff`]: exponential backoff, the one behind every retry and restart.
//! - [`log_limit`]: log throttling (lines per window, or per key), for what can come in floods.
//! - [`exit_budget`]: how the 10 s a stopping node has are shared among its stages.
//! - [`metrics`]: Prometheus metrics shared by all of the above.
//! - [`notify`]: systemd's readiness and watchdog notifications (`Type=notify`), from the
//!   environment.
//! - [`cli`]: command-line parsing, the client commands and the demo; `main.rs` only dispatches.
//! - [`run`] (in [`builder`]): one node, from configuration to a serving process.
#![forbid(unsafe_code)]

pub mod api;
pub mod backoff;
pub mod builder;
pub mod cli;
pub mod clock;
pub mod directory;
pub use pilot_election_core as election;
pub mod exec;
pub mod exit_budget;
pub mod group;
pub mod health_check;
pub mod hooks;
pub mod inbound;
pub mod jobs;
pub mod log_limit;
pub mod metrics;
pub mod notify;
pub mod observer;
pub mod observer_table;
pub mod open_files;
pub mod peer_client;
pub mod pilotctl;
pub mod process_group;
pub mod runtime;
pub mod schedule;
pub mod scheduled;
pub mod server;
pub mod signing;
pub mod store;
pub mod tls;
pub mod transport;

pub use builder::{run, run_observer, NodeBuilder, NodeConfig, ObserverNodeConfig, RunError};
