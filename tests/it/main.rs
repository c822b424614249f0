//! Integration tests: real `pilot-election` processes on 127.0.0.1 talking over the built-in
//! http transport.
//!
//! Clusters run one test at a time (see [`app::serial`]): on a loaded 2-core machine, several
//! clusters at once would test the scheduler rather than the failover times.

use support::agree;
use support::app;
mod app_health;
use support::browser;
use support::certs;
mod cli;
mod client;
mod cluster;
mod connections;
mod controls;
mod discovery;
use support::contract;
use support::devnet;
mod errors;
mod exec;
mod faults;
use support::flood;
mod fuzz;
mod groups;
mod haproxy;
mod health;
mod hooks;
mod jobs;
mod kernel;
mod kubernetes;
mod membership;
mod observers;
mod page;
mod peers;
mod pilot;
use support::pilot_cluster;
use support::proxy;
mod rolling;
mod state;
mod systemd;
mod tls;
mod transition;
use support::watch;
