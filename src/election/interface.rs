//! Everything that crosses the core's boundary: what the shell gives it ([`Input`], [`Config`],
//! [`Persistent`]), what it asks of the shell ([`Action`]) and what it reports ([`View`],
//! [`Member`], [`Transition`], [`Outcome`], [`CommandError`]).
//!
//! The contract with the shell (docs/protocol.md, rule 9 and "The shell's duties"):
//! 1. After every [`Node::handle`](super::Node::handle), the shell makes
//!    [`Node::view`](super::Node::view) the one everything answering for the node reads (the
//!    API, `--exec`) *before* it executes any of the step's actions. Leadership is therefore
//!    revoked everywhere before a `resign` can let another node take over.
//! 2. Actions run strictly in the order they were emitted; a [`Action::Persist`] is durable
//!    before any later [`Action::Publish`] leaves.
//! 3. `now` comes from a monotonic clock that keeps counting while the host is suspended.

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::membership::MemberSet;
use super::message::{Candidacy, Message};
use super::timings::Timings;

/// Static configuration of one node.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: String,
    pub group: String,
    /// Who votes, this node included; the quorum follows from it (rule 1).
    pub members: MemberSet,
    pub priority: u32,
    /// Whether this node is a candidate at start (`--no-candidate` clears it).
    pub eligible: bool,
    pub timings: Timings,
}

/// What must survive a restart: without it a node could vote twice in one term (rule 3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Persistent {
    pub term: u64,
    pub voted_for: Option<String>,
}

/// A node's role in the protocol, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Follower,
    /// Asking for pre-votes: nothing has changed yet (rule 4).
    PreCandidate,
    /// Has raised the term, voted for itself, and asks for real votes.
    Candidate,
    Leader,
}

/// Why the known leader changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Elected,
    StepDown,
    Transfer,
    Preempted,
    LeaseExpired,
    LeaderTimeout,
    HigherTerm,
    Shutdown,
}

impl Reason {
    pub const ALL: [Reason; 8] = [
        Reason::Elected,
        Reason::StepDown,
        Reason::Transfer,
        Reason::Preempted,
        Reason::LeaseExpired,
        Reason::LeaderTimeout,
        Reason::HigherTerm,
        Reason::Shutdown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Elected => "elected",
            Reason::StepDown => "step_down",
            Reason::Transfer => "transfer",
            Reason::Preempted => "preempted",
            Reason::LeaseExpired => "lease_expired",
            Reason::LeaderTimeout => "leader_timeout",
            Reason::HigherTerm => "higher_term",
            Reason::Shutdown => "shutdown",
        }
    }
}

/// A change of the leader this node knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub term: u64,
    pub leader: Option<String>,
    pub previous: Option<String>,
    pub reason: Reason,
}

/// What this node currently believes; the shell publishes it before executing a step's actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub node_id: String,
    pub role: Role,
    pub term: u64,
    pub leader: Option<String>,
    pub voted_for: Option<String>,
    /// For a leader: the end of its lease. It is leader only before this instant.
    pub lease_until: Option<Instant>,
    /// Last time the leader was heard (for a leader: the send time its lease was last renewed
    /// from).
    pub leader_heard_at: Option<Instant>,
    /// When this node learned of the current leader.
    pub leader_since: Option<Instant>,
    pub priority: u32,
    /// Configured candidacy.
    pub eligible: bool,
    /// Candidacy as this node advertises it now.
    pub candidacy: Candidacy,
    /// Whether it would campaign now.
    pub can_campaign: bool,
    /// Whether it may vote: false inside the start-up guard (rule 8) and while a member with a
    /// member set more than one id away is heard (rule 1). A node that cannot vote does not
    /// count towards a quorum for a new leader, which is what `/readyz` reports.
    pub can_vote: bool,
    /// Live members whose member set differs from ours by more than one id (rule 1).
    pub config_conflicts: Vec<String>,
    pub shutting_down: bool,
}

impl View {
    /// Leadership as a client may rely on it: the role and an unexpired lease.
    pub fn is_leader_at(&self, now: Instant) -> bool {
        self.role == Role::Leader && self.lease_until.is_some_and(|l| now < l)
    }
}

/// Another member, as this node last heard it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub priority: u32,
    /// Its latest advertised candidacy; `None` before it advertised anything.
    pub candidacy: Option<Candidacy>,
    /// Fingerprint of its member set, from its latest message.
    pub fingerprint: Option<String>,
    /// When any message of it last arrived; `None` if never.
    pub last_seen: Option<Instant>,
    /// Heard within `T`.
    pub live: bool,
    /// Live, and its latest advertisement says it hears this node.
    pub two_way: bool,
    /// Two-way, hears a quorum, same member set: it could win an election (rule 11).
    pub viable: bool,
    /// Ids by which its member set differs from ours (empty when the same or not yet known).
    pub member_difference: Vec<String>,
}

impl Member {
    /// Whether its member set is the same as this node's.
    pub fn matches(&self, own: &str) -> Option<bool> {
        self.fingerprint.as_deref().map(|f| f == own)
    }
}

/// What the shell gives the core.
// A message is the common input and is consumed at once; boxing it would cost an allocation per
// message to save a few hundred bytes of stack.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Input {
    /// Time has passed; fire whatever timers are due.
    Tick,
    /// A message from the wire (already parsed and authenticated by the shell).
    Message(Message),
    /// Operator asks the leader to step down, optionally naming who should lead next.
    StepDown {
        successor: Option<String>,
        expected_term: Option<u64>,
    },
    /// Announce or withdraw candidacy, optionally with a new priority.
    SetCandidacy {
        eligible: bool,
        priority: Option<u32>,
    },
    /// The process is stopping: hand over if leading, never campaign again.
    Shutdown,
}

/// What the core asks the shell to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write durably before executing any later action.
    Persist(Persistent),
    /// Send to the group (every member, this one included, may receive it).
    Publish(Message),
    /// The known leader changed.
    Transition(Transition),
}

/// How an input was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acted upon (a command done, a message that counted).
    Accepted,
    /// A message for an older term or a finished round.
    Stale,
    /// A message not for us (other group, our own echo) or refused by a rule.
    Ignored,
    /// A message from a node that is not a member: it changed nothing (rule 1).
    NotMember,
    /// A vote, acknowledgement or candidacy from a member whose member set differs from ours:
    /// not counted (rule 1).
    OtherMembers,
    /// The step-down command was carried out.
    SteppedDown {
        term: u64,
        successor: Option<String>,
    },
}

impl Outcome {
    /// The label metrics count received messages by.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Accepted | Outcome::SteppedDown { .. } => "accepted",
            Outcome::Stale => "stale",
            Outcome::Ignored => "ignored",
            Outcome::NotMember => "not_member",
            Outcome::OtherMembers => "other_members",
        }
    }
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("this node is not the leader (term {term}, leader {leader:?})")]
    NotLeader { term: u64, leader: Option<String> },
    #[error("expected term {expected} but the current term is {current}")]
    TermMismatch { expected: u64, current: u64 },
    #[error("successor {successor:?} cannot lead: {reason}")]
    SuccessorIneligible { successor: String, reason: String },
}
