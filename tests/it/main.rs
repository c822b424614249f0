//! Integration tests: real `pilot-election` processes on 127.0.0.1 talking over the built-in
//! http transport.
//!
//! Clusters run one test at a time (see [`app::serial`]): on a loaded 2-core machine, several
//! clusters at once would test the scheduler rather than the failover times.

#[path = "../support/app.rs"]
mod app;
#[path = "../support/browser.rs"]
mod browser;
mod cli;
mod cluster;
mod connections;
mod contract;
#[path = "../support/devnet.rs"]
mod devnet;
mod errors;
mod exec;
mod faults;
#[path = "../support/flood.rs"]
mod flood;
mod fuzz;
mod health;
mod membership;
mod memory;
mod page;
mod peers;
mod pilot;
#[path = "../support/pilot_cluster.rs"]
mod pilot_cluster;
#[path = "../support/proxy.rs"]
mod proxy;
mod rolling;
mod state;
#[path = "../support/watch.rs"]
mod watch;
