//! The election core: a deterministic, sans-IO state machine.
//!
//! It owns no clock, socket, process or entropy. The shell feeds it [`Input`]s with the current
//! time, then drains [`Action`]s with [`Node::poll_action`] and sleeps until
//! [`Node::poll_timeout`]. Because time and randomness are arguments, a whole cluster of cores
//! can be run deterministically by the simulator (the `pilot-election-sim` crate).
//!
//! The protocol is specified in docs/protocol.md (numbered rules, the safety argument and the
//! invariants the simulator checks): a prioritized quorum election among an explicit member set,
//! with pre-vote, one persisted vote per term, leases renewed by quorum acknowledgements,
//! CheckQuorum, resign with or without a successor, preemption, and ranking that trusts only
//! members proven to hear the cluster.
//!
//! Layout: [`interface`] (the types that cross the boundary), [`membership`] (who votes),
//! [`rank`] (who leads first), `peers` (what this node knows of the others), `node` (the state
//! machine), [`message`] (the wire), [`batch`] (many messages in one), `timings` (durations and
//! the safety inequality).
#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub)]

pub mod batch;
pub mod firing;
pub mod interface;
pub mod membership;
mod message;
mod node;
pub mod observed;
mod peers;
mod priority;
pub mod rank;
mod rng;
pub mod stop;
mod timings;

pub use firing::{Firing, FiringBook, FiringState};
pub use interface::{
    Action, CommandError, Config, Input, Member, Outcome, Persistent, Readiness, Reason, Role,
    SuccessorRefused, Transition, View,
};
pub use membership::{quorum_of, MemberSet, MembershipError};
pub use message::{
    Advert, Announced, Body, Candidacy, Maintenance, Message, NodeInfo, Versions, WireError,
    MAX_ANNOUNCED_MS, MAX_HEARS, MAX_ID_BYTES, MAX_MESSAGE_BYTES, PREVIOUS_VERSION,
    PROTOCOL_VERSION,
};
pub use node::Node;
pub use priority::{cksum, default_priority};
pub use rank::Rank;
pub use rng::Rng;
pub use timings::{whole_ms, Timings, TimingsError};

#[cfg(test)]
mod tests;
