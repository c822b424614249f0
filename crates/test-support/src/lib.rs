//! Shared by every test binary of the service and by the benchmarks (`examples/bench/`): one
//! copy of how a node is started, watched, faulted and stopped. Processes it starts listen on
//! 127.0.0.1, on ports [`app::free_port`] picks, and are killed by PID when dropped; every wait
//! has a deadline.
//!
//! - [`app`]: one node as a child process, a cluster of them, free ports, temp dirs, HTTP
//!   helpers and waits with deadlines.
//! - [`blocking`]: one blocking HTTP GET and a wait with a deadline, for the container tests.
//! - [`proxy`]: a relay per directed link, to cut, hold or slow it (deaf, mute, partitioned
//!   nodes).
//! - [`faults`]: issue 11's persistent faults (deaf, mute, crash-looping node) on three nodes
//!   over http or pilot, sampled and judged; for the fault tests and the bench.
//! - [`watch`]: the leadership watcher: polls `/role/leader` on every node and reports two
//!   leaders and leaderless gaps (every test that watches leadership uses it, containers too).
//! - [`agree`]: the wait until every node names one leader in one term.
//! - [`devnet`]: a running pilot-devnet and the real pilotctl; [`pilot_cluster`]: nodes on it.
//! - [`flood`]: hostile clients (half-open connections, event-stream and POST floods).
//! - [`netns`]: nodes in network namespaces, with nftables rules for faults the kernel makes.
//! - [`observers`]: observer processes (`run --observe`) over http or pilot.
//! - [`browser`]: headless Chromium over the DevTools pipe, for the status page.
//! - [`certs`]: a CA and certificates for 127.0.0.1, made in the run.
//! - [`contract`]: `openapi.yaml` as a checker of answers.
#![forbid(unsafe_code)]
// Test deadlines are measured on tokio's clock; the protocol's clock rules are the service's.
#![allow(clippy::disallowed_methods)]

/// What a test that misses an outside program says: the README's test command installs every one
/// of them (and `cargo test` alone fails, never skips, without them).
pub const SET_UP: &str = "scripts/test installs it and then runs every test";

pub mod agree;
pub mod app;
pub mod blocking;
pub mod browser;
pub mod certs;
pub mod contract;
pub mod devnet;
pub mod faults;
pub mod flood;
pub mod netns;
pub mod observers;
pub mod pilot_cluster;
pub mod proxy;
pub mod watch;
