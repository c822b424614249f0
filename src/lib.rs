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
#![forbid(unsafe_code)]

pub mod election;
pub mod pilotctl;
pub mod signing;
pub mod sim;
