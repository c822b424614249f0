//! The election core: a deterministic, sans-IO state machine.
//!
//! It owns no clock, socket, process or entropy. The shell feeds it [`Input`]s with the current
//! monotonic time, then drains [`Action`]s with [`Node::poll_action`] and sleeps until
//! [`Node::poll_timeout`]. Because time and randomness are arguments, a whole cluster of cores
//! can be run deterministically by the simulator in [`crate::sim`].
//!
//! The protocol (see DESIGN.md, "The protocol") is a prioritized quorum election with leases:
//! pre-vote, one persisted vote per term, leader stickiness, rank stagger, leases renewed by
//! quorum acknowledgements, CheckQuorum, resign with or without a successor, and preemption.

mod message;
mod node;
mod priority;
mod rng;
mod timings;

pub use message::{Body, Message, WireError, MAX_ID_BYTES, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
pub use node::{
    Action, CommandError, Config, Input, Member, Node, Outcome, Persistent, Reason, Role,
    Transition, View,
};
pub use priority::{cksum, default_priority};
pub use rng::Rng;
pub use timings::{Timings, TimingsError};
