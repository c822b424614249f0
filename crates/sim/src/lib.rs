//! Deterministic simulation of whole clusters of election cores.
//!
//! One seed fixes everything: the scenario family, cluster size, timings, fault schedule,
//! message loss, delays, clock rates and jitter. The world advances a virtual true clock from
//! event to event; each node sees its own drifting clock, and a model of the runtime executes
//! its actions one at a time. After every event the [`checker`] verifies the safety invariants,
//! so a violation names the exact seed and moment, and `SIM_SEED=<seed>` replays it.
//!
//! The simulator is generic over [`Protocol`], so that deliberately broken protocols can be run
//! through the same harness to show that it does catch split brain.

pub mod checker;
pub mod groups;
pub mod previous;
pub mod scenario;
pub mod world;

pub use checker::Violation;
pub use groups::{run_groups, run_groups_seed, GroupsReport, Mix};
pub use scenario::{run_scenario, run_seed, Family, Scenario, SeedReport};
pub use world::{Build, FiringRule, ObserverRule, Protocol, World, WorldConfig};
