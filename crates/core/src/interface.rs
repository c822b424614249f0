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
use super::message::{Announced, Candidacy, Message, Versions};
use super::timings::Timings;

/// Static configuration of one node.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's name in `from`, votes and `hears`, and the tie-break of its rank (rule 11).
    pub node_id: String,
    /// The election group; messages of any other group are dropped before anything is read.
    pub group: String,
    /// Who votes, this node included; the quorum follows from it (rule 1).
    pub members: MemberSet,
    /// The first part of the rank `(priority, id)` (rule 11): higher leads first.
    pub priority: u32,
    /// Whether this node is a candidate at start (`--no-candidate` clears it).
    pub eligible: bool,
    /// Whether its application counts as healthy at start (rule 17): false with a health
    /// check, until the check first passes. Starting unhealthy is not a loss of health, so it
    /// is no flap (rule 12).
    pub healthy: bool,
    /// `h`, `L`, `T`, `P`, `r`: the shell checks them with [`Timings::validate`] (rule 7); the
    /// core trusts them.
    pub timings: Timings,
    /// The node's beat (rule 18): with `Some(epoch)`, heartbeats and presences fall on the
    /// instants `epoch + k·h` (a quarter of that while a lease is at risk), never further
    /// apart than without it, so that the elections of many groups in one process, given one
    /// epoch, send on the same instants and their messages can travel in one wire message.
    /// `None`: every `h` after the last one sent, as a process of one election did.
    pub beat: Option<Instant>,
}

/// What must survive a restart: without it a node could vote twice in one term (rule 3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Persistent {
    /// The highest term seen; durable before anything that depends on it leaves (rule 2).
    pub term: u64,
    /// Whom this node voted for in `term`, if anyone; durable before the `vote` leaves (rule 3).
    pub voted_for: Option<String>,
    /// The longest promise (rule 5) that may still be running; the start-up guard lasts at
    /// least this long (rule 8), whatever `T` the next run has. Durable before a longer
    /// promise leaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promised: Option<std::time::Duration>,
}

/// A node's role in the protocol, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Follows the known leader, or waits out `T` (plus stagger and jitter) when none is known.
    Follower,
    /// Asking for pre-votes: nothing has changed yet (rule 4).
    PreCandidate,
    /// Has raised the term, voted for itself, and asks for real votes.
    Candidate,
    /// Won a quorum of votes in its term; answers as leader only while its lease lasts (rule 6).
    Leader,
}

/// Why the known leader changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// A node won the term, or this node began following it on its heartbeat or victory.
    Elected,
    /// The leader resigned without naming a successor: an operator or a withdrawal (rule 10).
    StepDown,
    /// The leader resigned naming a successor, who campaigns at once (rule 10).
    Transfer,
    /// The leader handed over to a better-ranked member viable for `max(P, T)` (rule 12).
    Preempted,
    /// No quorum renewed the lease in time: CheckQuorum made the leader resign (rule 6).
    LeaseExpired,
    /// A follower heard nothing of its leader for `T` and forgot it.
    LeaderTimeout,
    /// A higher term was seen, so the old term's leader no longer counts (rule 2).
    HigherTerm,
    /// The leader is stopping and handed over (rule 13).
    Shutdown,
    /// The leader's application health check failed: it handed over to a healthy member
    /// (rule 17).
    Unhealthy,
}

impl Reason {
    /// The snake_case name, as serialized and as the transition metric labels it.
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
            Reason::Unhealthy => "unhealthy",
        }
    }
}

/// A change of the leader this node knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The term this node is in after the change.
    pub term: u64,
    /// The leader now known; `None` starts a leaderless stretch.
    pub leader: Option<String>,
    /// The leader known before; `None` ends a leaderless stretch.
    pub previous: Option<String>,
    /// Why, for logs, events and the transition metric.
    pub reason: Reason,
}

/// What this node currently believes; the shell publishes it before executing a step's actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Whose view this is, so a published snapshot names its node.
    pub node_id: String,
    /// The role now; `Leader` is trustworthy only with an unexpired lease ([`View::is_leader_at`]).
    pub role: Role,
    /// The current term; a leader's is on disk before it leads, so it can fence writes.
    pub term: u64,
    /// The leader this node knows in `term` (itself when leading); `None` while leaderless.
    pub leader: Option<String>,
    /// Its vote in `term` (rule 3), shown for diagnosis.
    pub voted_for: Option<String>,
    /// For a leader: the end of its lease. It is leader only before this instant.
    pub lease_until: Option<Instant>,
    /// Until when this node vouches for `leader`: for a leader its lease, for a follower the
    /// end of the promise it made its leader (heard within that, rule 5). See
    /// [`View::leader_at`].
    pub leader_until: Option<Instant>,
    /// Last time the leader was heard (for a leader: the send time of the newest heartbeat a
    /// quorum acknowledged, from which it was the only leader until that quorum was complete).
    pub leader_heard_at: Option<Instant>,
    /// When this node learned of the current leader.
    pub leader_since: Option<Instant>,
    /// The priority now (a command may have changed it): the first part of the rank (rule 11).
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
    /// Shutdown has begun: it advertises `stopping` and never campaigns again (rule 13).
    pub shutting_down: bool,
    /// The promise this node keeps now (rule 5): it votes for nobody but this member until
    /// this instant.
    pub promise: Option<(String, Instant)>,
    /// The protocol version this node writes now: the newest every member it heard speaks
    /// (rule 15).
    pub writes_version: u32,
    /// Maintenance is on here: no campaign of its own, no preemption (rule 16).
    pub maintenance: bool,
    /// Its application is healthy, as the shell last said (rule 17): an unhealthy node ranks
    /// below every healthy member, and an unhealthy leader hands over to a healthy one.
    pub healthy: bool,
}

/// The one judgement of "who leads, as of now" that everything answering for a node makes (the
/// API's `/leader`, `/role/*`, `/status`, `/events`, `/metrics`, the page, `--exec`, and the
/// simulator's checker): a view is taken at one instant, and read at a later one.
impl View {
    /// Leadership as a client may rely on it: the role and an unexpired lease.
    pub fn is_leader_at(&self, now: Instant) -> bool {
        self.role == Role::Leader && self.lease_until.is_some_and(|l| now < l)
    }

    /// Whether `input`, given at `now` to the node this view is of, hands leadership over if
    /// the core carries it out: a step-down (of this term, when it names one) or a candidacy
    /// withdrawal, while the node leads. What acts on the leadership outside the core (an
    /// `--exec` child, the holds of leader-only jobs) is stopped before such a command is
    /// given, so that nothing of it outlives the resign; the core may still refuse it (a
    /// successor that cannot lead), and then nothing was handed over. The one place that
    /// says which commands do: the shell asks, it does not judge.
    pub fn hands_over(&self, input: &Input, now: Instant) -> bool {
        if !self.is_leader_at(now) {
            return false;
        }
        match input {
            Input::StepDown { expected_term, .. } => expected_term.is_none_or(|t| t == self.term),
            Input::SetCandidacy { eligible, .. } => !eligible,
            _ => false,
        }
    }

    /// The role as of `now`: a leader whose lease ran out since the view was taken (its loop is
    /// stuck) is no leader any more.
    pub fn role_at(&self, now: Instant) -> Role {
        match self.role {
            Role::Leader if !self.is_leader_at(now) => Role::Follower,
            role => role,
        }
    }

    /// The leader this node vouches for at `now`: itself only under an unexpired lease, another
    /// node only within the promise it made it (heard within that leader's `T`, or ours).
    pub fn leader_at(&self, now: Instant) -> Option<&str> {
        let leader = self.leader.as_deref()?;
        if leader == self.node_id {
            return self.is_leader_at(now).then_some(leader);
        }
        self.leader_until.is_some_and(|u| now < u).then_some(leader)
    }
}

/// Whether a node's vote counts towards a quorum now, as `/readyz` reports it (the shell adds
/// its transport's health) and the simulator's rolling restarts wait for it: it can vote (past
/// its start-up guard, rule 8; no member set two ids away heard, rule 1), it is not stopping,
/// and it hears a quorum of members with its own member set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// It may vote (see [`View::can_vote`]).
    pub can_vote: bool,
    /// Shutdown has begun.
    pub shutting_down: bool,
    /// Live members with this node's member set, this node included.
    pub voters_heard: usize,
    /// How many a quorum needs.
    pub quorum: usize,
    /// Live members whose member set differs (their votes do not count here).
    pub mismatched: Vec<String>,
}

impl Readiness {
    /// Judged from a view and the members as the same node knows them.
    pub fn of(view: &View, members: &[Member], set: &MemberSet) -> Readiness {
        let own = set.fingerprint();
        let heard = |same: bool| {
            members
                .iter()
                .filter(move |m| m.live && m.matches(own) == Some(same))
        };
        Readiness {
            can_vote: view.can_vote,
            shutting_down: view.shutting_down,
            voters_heard: 1 + heard(true).count(),
            quorum: set.quorum(),
            mismatched: heard(false).map(|m| m.id.clone()).collect(),
        }
    }

    /// Ready, as far as the election goes.
    pub fn ready(&self) -> bool {
        self.can_vote && !self.shutting_down && self.voters_heard >= self.quorum
    }
}

/// Another member, as this node last heard it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its id in our member set: the tie-break of its rank (rule 11).
    pub id: String,
    /// Its priority from its latest advert or election request (0 until heard): its rank.
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
    /// The timings its latest message announced (`None` from a version-2 build or before it
    /// was heard).
    pub timings: Option<Announced>,
    /// The protocol versions its latest message says it speaks (rule 15).
    pub speaks: Option<Versions>,
    /// Whether its latest advert says its application is healthy (rule 17); `None` before it
    /// advertised anything.
    pub healthy: Option<bool>,
    /// Since when it has been eligible and healthy without a silence of `T` (rules 12, 17);
    /// `None` while it is not.
    pub eligible_since: Option<Instant>,
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
        /// Who should lead next; refused unless it could win now (rule 10).
        successor: Option<String>,
        /// Act only if this is still the term, so a stale request cannot depose a new leader.
        expected_term: Option<u64>,
    },
    /// Announce or withdraw candidacy, optionally with a new priority.
    SetCandidacy {
        /// False withdraws: a leader resigns to its best successor, a round is abandoned.
        eligible: bool,
        /// A new priority; a presence tells the others at once so their ranking follows.
        priority: Option<u32>,
    },
    /// Maintenance (the operator's cluster-wide pause, which the shell keeps and spreads):
    /// while on, this node starts no campaign of its own and never preempts (rule 16). A
    /// leader keeps leading; a member named by a leader's resign still campaigns.
    SetMaintenance {
        /// On or off.
        on: bool,
    },
    /// The process is stopping: hand over if leading, never campaign again.
    Shutdown,
    /// The application's health as the shell's check judges it (rule 17): an unhealthy node
    /// ranks below every healthy member and says so in its adverts; an unhealthy leader hands
    /// over to the best healthy member that could take over. It still votes, and still leads
    /// when no member is healthy.
    SetHealth {
        /// Healthy or not.
        healthy: bool,
    },
    /// A consistent read asks the leader to confirm it still leads: a leader heartbeats now
    /// (unless it did at this very instant) and [`View::leader_heard_at`] reaches `now` once a
    /// quorum acknowledged it. Refused with [`CommandError::NotLeader`] by any other node.
    ConfirmLeadership,
}

/// What the core asks the shell to do, in order.
// A message is the common action and is executed at once; boxing it would cost an allocation
// per message to save a few hundred bytes (the same trade as `Input`).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Before executing any later action, everything that acts on this node's leadership of
    /// `term` outside the core must have stopped (an `--exec` child, a leader-only job): the
    /// resign that follows releases the others to elect at once (rules 9 and 10). Comes before
    /// the first resign of a term, never otherwise.
    Release {
        /// The term this node led and gives up.
        term: u64,
    },
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
        /// The term it led and resigned in.
        term: u64,
        /// The successor its resign named, if any.
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
    /// Only a leader with an unexpired lease can step down.
    #[error("this node is not the leader (term {term}, leader {leader:?})")]
    NotLeader {
        /// This node's current term.
        term: u64,
        /// The leader it knows, so the client can retry there.
        leader: Option<String>,
    },
    /// The request's `expected_term` is no longer current: leadership changed since.
    #[error("expected term {expected} but the current term is {current}")]
    TermMismatch {
        /// The term the client saw.
        expected: u64,
        /// The term now.
        current: u64,
    },
    /// Maintenance is on and the leader has nobody to hand over to: stepping down would leave
    /// the cluster leaderless until maintenance ends, since nobody campaigns (rule 16).
    #[error("maintenance is on and no member can take over now; name a successor that can, or end maintenance first")]
    NoSuccessorInMaintenance,
    /// The named successor could not win an election now (rule 10).
    #[error("successor {successor:?} cannot lead: {reason}")]
    SuccessorIneligible {
        /// The id the operator named.
        successor: String,
        /// Which check it failed.
        reason: SuccessorRefused,
    },
}

/// Why a named successor was refused (rule 10): the first check it failed of those that say it
/// could win an election now, or the moment the leader's resign releases its start-up guard.
/// The wording of each says what would make the same request succeed, so that an operator (or a
/// script retrying it) knows whether to wait, fix something, or name another node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuccessorRefused {
    /// It is the leader itself, which is stepping down.
    #[error("it is this node, which is stepping down; name another member")]
    Itself,
    /// It is not in the member set.
    #[error("it is not a member ({members}); name a member, or add it first (docs/guide/operations.md, \"Changing the members\")")]
    NotMember {
        /// The member set, as [`MemberSet`] displays it.
        members: String,
    },
    /// It has never been heard from.
    #[error("it has never been heard from; accepted once it is (a running member is heard within {heard_within_ms} ms)")]
    NeverHeard {
        /// How often a running member is heard (`h`).
        heard_within_ms: u64,
    },
    /// It has not been heard from within its live window (rule 11).
    #[error("not heard from for {silent_ms} ms; accepted once it is heard again (a running member is heard within {heard_within_ms} ms)")]
    Silent {
        /// How long ago it was last heard.
        silent_ms: u64,
        /// How often a running member is heard (`h`).
        heard_within_ms: u64,
    },
    /// Its member set is not ours, so it could not collect our quorum (rule 1).
    #[error("it has another member set (fingerprint {}, ours {ours}); accepted once both list the same members", .theirs.as_deref().unwrap_or("?"))]
    OtherMembers {
        /// Its member-set fingerprint, if it said one.
        theirs: Option<String>,
        /// Ours.
        ours: String,
    },
    /// Its adverts do not list this node: a one-way link (rule 11).
    #[error("it does not hear this node (one-way link); accepted once its adverts (every {heard_within_ms} ms) show it hears this node")]
    OneWay {
        /// How often its adverts come (`h`).
        heard_within_ms: u64,
    },
    /// Its adverts do not cover a quorum of the members: it is not viable (rule 11).
    #[error("it does not hear a quorum of the members; accepted once its adverts (every {heard_within_ms} ms) show it does")]
    NoQuorum {
        /// How often its adverts come (`h`).
        heard_within_ms: u64,
    },
    /// It has withdrawn its candidacy.
    #[error("it has withdrawn its candidacy; accepted once it is restored (POST /candidacy on that node)")]
    Withdrawn,
    /// It is shutting down (rule 13).
    #[error("it is shutting down; name another member")]
    Stopping,
    /// It has not advertised a candidacy yet.
    #[error("it has not advertised its candidacy yet; accepted once its first advert arrives (within {heard_within_ms} ms of its start)")]
    NoCandidacyYet {
        /// How soon a starting member advertises (`h`).
        heard_within_ms: u64,
    },
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;

    /// A view of node `a` in term 3: `role`, knowing `leader`; no lease, no promise.
    pub(crate) fn view(role: Role, leader: Option<&str>) -> View {
        View {
            node_id: "a".into(),
            role,
            term: 3,
            leader: leader.map(str::to_string),
            voted_for: None,
            lease_until: None,
            leader_until: None,
            leader_heard_at: None,
            leader_since: None,
            priority: 1,
            eligible: true,
            healthy: true,
            candidacy: Candidacy::Eligible,
            can_campaign: true,
            can_vote: true,
            config_conflicts: Vec::new(),
            shutting_down: false,
            promise: None,
            writes_version: 3,
            maintenance: false,
        }
    }

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    /// Any instant: every time in these tests is an offset from it.
    fn origin() -> Instant {
        #[allow(clippy::disallowed_methods)]
        Instant::now()
    }

    #[test]
    fn a_leader_answers_as_leader_only_before_its_lease_ends() {
        let t0 = origin();
        let leader = View {
            lease_until: Some(at(t0, 100)),
            ..view(Role::Leader, Some("a"))
        };
        assert!(leader.is_leader_at(at(t0, 99)));
        assert!(
            !leader.is_leader_at(at(t0, 100)),
            "the lease's end is outside it"
        );
        assert_eq!(leader.role_at(at(t0, 99)), Role::Leader);
        assert_eq!(
            leader.role_at(at(t0, 100)),
            Role::Follower,
            "a stuck leader"
        );
        assert_eq!(leader.leader_at(at(t0, 99)), Some("a"));
        assert_eq!(leader.leader_at(at(t0, 100)), None);
        // Without a lease, or with a lease left over in a view that no longer leads: no leader.
        let no_lease = view(Role::Leader, Some("a"));
        assert!(!no_lease.is_leader_at(t0));
        let stepped_down = View {
            lease_until: Some(at(t0, 100)),
            ..view(Role::Follower, Some("a"))
        };
        assert!(!stepped_down.is_leader_at(at(t0, 50)));
        assert_eq!(stepped_down.role_at(at(t0, 50)), Role::Follower);
        assert_eq!(stepped_down.leader_at(at(t0, 50)), None);
        // Roles other than leader are what they are, at any time.
        for role in [Role::Follower, Role::PreCandidate, Role::Candidate] {
            assert_eq!(view(role, None).role_at(at(t0, 1_000)), role);
        }
    }

    #[test]
    fn only_a_step_down_of_this_term_or_a_withdrawal_by_a_leader_hands_over() {
        let t0 = origin();
        let leader = View {
            lease_until: Some(at(t0, 100)),
            ..view(Role::Leader, Some("a"))
        };
        let step_down = |expected_term| Input::StepDown {
            successor: None,
            expected_term,
        };
        let candidacy = |eligible| Input::SetCandidacy {
            eligible,
            priority: None,
        };
        let now = at(t0, 50);
        assert!(leader.hands_over(&step_down(None), now));
        assert!(leader.hands_over(&step_down(Some(3)), now));
        assert!(
            !leader.hands_over(&step_down(Some(2)), now),
            "another term's"
        );
        assert!(leader.hands_over(&candidacy(false), now));
        assert!(!leader.hands_over(&candidacy(true), now));
        assert!(!leader.hands_over(&Input::Tick, now));
        assert!(!leader.hands_over(&Input::SetMaintenance { on: true }, now));
        // Not leading, or no longer under the lease: nothing to hand over.
        assert!(!leader.hands_over(&step_down(None), at(t0, 100)));
        let follower = view(Role::Follower, Some("b"));
        assert!(!follower.hands_over(&step_down(None), now));
        assert!(!follower.hands_over(&candidacy(false), now));
    }

    #[test]
    fn another_leader_is_vouched_for_only_within_the_promise_to_it() {
        let t0 = origin();
        let follower = View {
            leader_until: Some(at(t0, 100)),
            ..view(Role::Follower, Some("b"))
        };
        assert_eq!(follower.leader_at(at(t0, 99)), Some("b"));
        assert_eq!(follower.leader_at(at(t0, 100)), None);
        assert_eq!(view(Role::Follower, Some("b")).leader_at(t0), None);
        assert_eq!(view(Role::Follower, None).leader_at(t0), None);
    }

    #[test]
    fn reasons_are_named_as_they_are_serialized() {
        let every = [
            Reason::Elected,
            Reason::StepDown,
            Reason::Transfer,
            Reason::Preempted,
            Reason::LeaseExpired,
            Reason::LeaderTimeout,
            Reason::HigherTerm,
            Reason::Shutdown,
            Reason::Unhealthy,
        ];
        for r in every {
            let json = serde_json::to_value(r).expect("serializes");
            assert_eq!(json.as_str(), Some(r.as_str()), "{r:?}");
        }
        assert_eq!(Reason::LeaseExpired.as_str(), "lease_expired");
    }

    #[test]
    fn outcomes_are_counted_under_their_documented_labels() {
        let labels = [
            (Outcome::Accepted, "accepted"),
            (
                Outcome::SteppedDown {
                    term: 1,
                    successor: None,
                },
                "accepted",
            ),
            (Outcome::Stale, "stale"),
            (Outcome::Ignored, "ignored"),
            (Outcome::NotMember, "not_member"),
            (Outcome::OtherMembers, "other_members"),
        ];
        for (outcome, label) in labels {
            assert_eq!(outcome.label(), label, "{outcome:?}");
        }
    }

    #[test]
    fn readiness_counts_live_members_of_our_set_only() {
        let set = MemberSet::new("a", ["a", "b", "c", "d", "e"]).expect("valid");
        let own = set.fingerprint().to_string();
        let member = |id: &str, live: bool, fingerprint: Option<&str>| Member {
            eligible_since: None,
            healthy: None,
            id: id.into(),
            priority: 1,
            candidacy: Some(Candidacy::Eligible),
            fingerprint: fingerprint.map(str::to_string),
            last_seen: None,
            live,
            two_way: live,
            viable: live,
            member_difference: Vec::new(),
            timings: None,
            speaks: None,
        };
        let members = [
            member("b", true, Some(&own)),
            member("c", false, Some(&own)),
            member("d", true, Some("other")),
            member("e", false, Some("other")),
        ];
        let r = Readiness::of(&view(Role::Follower, None), &members, &set);
        assert_eq!(r.voters_heard, 2, "itself and b; c is not live");
        assert_eq!(r.quorum, 3);
        assert_eq!(r.mismatched, vec!["d".to_string()], "e is not live");
        assert!(!r.ready());
        let r = Readiness {
            voters_heard: 3,
            ..r
        };
        assert!(r.ready());
        assert!(!Readiness {
            can_vote: false,
            ..r.clone()
        }
        .ready());
        assert!(!Readiness {
            shutting_down: true,
            ..r
        }
        .ready());
    }
}
