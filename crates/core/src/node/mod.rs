//! The election state machine of one node. Every rule it implements is numbered in
//! docs/protocol.md; comments cite them as "rule N".
//!
//! Reading order: [`Node::handle`] (one input, here), the timers as one table (`timers.rs`),
//! the wire (`receive.rs`), then what each role does: `campaign.rs` (rules 4 and 11),
//! `lead.rs` (rules 6, 10, 12 and 17), `follow.rs` (rules 5, 8 and 10), `vote.rs` (rules 5, 10
//! and 11), with `send.rs` for everything that leaves and `commands.rs` for the shell's
//! commands. State that only exists in one role lives inside that role's variant of [`State`],
//! so it cannot go stale when the role changes.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::interface::{
    Action, CommandError, Config, Input, Member, Outcome, Persistent, Role, View,
};
use crate::membership::MemberSet;
use crate::message::Candidacy;
use crate::peers::{Peers, FLAP_WINDOW};
use crate::rng::Rng;
use crate::timings::Timings;

mod campaign;
mod commands;
mod follow;
mod lead;
mod receive;
mod send;
mod timers;
mod vote;

use campaign::Round;
use lead::{Leadership, PendingResign};
use timers::{CampaignTimer, Timer};
use vote::Voter;

/// The leader a follower knows.
#[derive(Debug, Clone)]
struct KnownLeader {
    id: String,
    /// Last heartbeat (or victory declaration) from it.
    heard_at: Instant,
    /// When this node learned of it.
    since: Instant,
    /// Silent this long after `heard_at`, it is gone: the promise this node made it (rule 5),
    /// which covers the leader's own `T` whatever ours is.
    silence: Duration,
}

/// The role and the state only that role has.
#[derive(Debug, Clone)]
enum State {
    Follower { leader: Option<KnownLeader> },
    PreCandidate(Round),
    Candidate(Round),
    Leader(Leadership),
}

/// The start-up guard (rule 8): for `T` after start, or until released, this node neither
/// votes nor campaigns, because an acknowledgement it sent before a crash may still be holding
/// up a leader's lease.
#[derive(Debug, Clone, Copy)]
struct BootGuard {
    until: Instant,
    /// The term persisted at start: evidence about this or a later term releases the guard.
    term: u64,
}

/// A leader that resigned in `term`: out of the ranking until a new term.
#[derive(Debug, Clone)]
struct Resigned {
    leader: String,
    term: u64,
}

/// The election state machine of one node.
#[derive(Debug, Clone)]
pub struct Node {
    id: String,
    group: String,
    members: MemberSet,
    timings: Timings,
    /// The instants heartbeats and presences fall on (rule 18; [`Config::beat`]).
    beat: Option<Instant>,
    /// Current priority (changeable through `SetCandidacy`).
    priority: u32,
    /// Configured candidacy.
    eligible: bool,
    rng: Rng,

    /// Durable (rule 2, rule 3): the shell persists both before any message that depends on
    /// them leaves.
    term: u64,
    voted_for: Option<String>,

    state: State,
    boot: Option<BootGuard>,
    /// After resigning, no campaign until then (rule 10).
    cooldown_until: Option<Instant>,
    /// When this node last flapped as the others see it (rule 12): it came back from a restart
    /// or resigned because it lost its quorum. Until a flap window has passed it ranks itself
    /// below steady members too, so that it never vetoes a steady member that vetoes it.
    flapped_at: Option<Instant>,
    flap_window: Duration,
    shutting_down: bool,
    voter: Voter,
    /// The promises this node made, by length, with the latest end of each: the start-up guard
    /// after a crash must outlast them (rule 8), so the longest is persisted before a longer
    /// one leaves. Every length counts, its own `T` too: the next run may have a shorter `T`.
    promises: BTreeMap<Duration, Instant>,
    /// The longest promise the latest `Persist` recorded (`None`: none that may still run).
    promised: Option<Duration>,
    resigned: Option<Resigned>,
    peers: Peers,
    timer: CampaignTimer,

    /// The time of the latest input, for the deadline computed without one.
    last_input: Instant,
    /// Next sequence number; the shell starts it above every number used before.
    seq: u64,
    last_sent: Option<Instant>,
    /// The candidacy the others last heard from us; a change is announced at once.
    advertised: Option<Candidacy>,
    pending_resign: Option<PendingResign>,
    /// The operator's maintenance (rule 16): no campaign of our own, no preemption.
    maintenance: bool,
    /// The application's health as the shell last said (rule 17).
    healthy: bool,
    /// It lost its health in this run: the recovery that follows is a flap too (rule 17).
    lost_health: bool,
    actions: VecDeque<Action>,
}

impl Node {
    /// A node that starts (or restarts) at `now` with the state it last persisted.
    ///
    /// `seq_start` is the first sequence number it will use: the shell keeps it above every
    /// number used before (for example a boot epoch in the high bits). `seed` drives the jitter.
    pub fn new(
        config: Config,
        persisted: Persistent,
        now: Instant,
        seed: u64,
        seq_start: u64,
    ) -> Node {
        let t = config.timings;
        // Rule 8: as long as the longest promise it may have made before (its own T at least).
        let promised = persisted.promised.unwrap_or_default();
        let boot_for = t.election_timeout.max(promised);
        let flap_window = t.preempt_after.max(t.election_timeout) * FLAP_WINDOW;
        let peers = Peers::new(
            &config.node_id,
            &config.members,
            t.election_timeout,
            flap_window,
        );
        let mut node = Node {
            id: config.node_id,
            group: config.group,
            members: config.members,
            timings: t,
            beat: config.beat,
            priority: config.priority,
            eligible: config.eligible,
            rng: Rng::new(seed),
            term: persisted.term,
            voted_for: persisted.voted_for.clone(),
            state: State::Follower { leader: None },
            // Rule 8: an ack sent before a crash may still hold a lease, for as long as the
            // longest promise this node may have made.
            boot: Some(BootGuard {
                until: now + boot_for,
                term: persisted.term,
            }),
            cooldown_until: None,
            // A node that took part before (a term on disk) is back from a restart: a flap in
            // the eyes of every member that saw it eligible. A first start is not one.
            flapped_at: (persisted.term > 0).then_some(now),
            flap_window,
            shutting_down: false,
            voter: Voter::default(),
            promises: BTreeMap::new(),
            promised: persisted.promised,
            resigned: None,
            peers,
            timer: CampaignTimer {
                base: now,
                wait: t.election_timeout,
                jitter: Duration::ZERO,
                at_once: None,
            },
            last_input: now,
            seq: seq_start,
            last_sent: None,
            advertised: None,
            pending_resign: None,
            maintenance: false,
            healthy: config.healthy,
            lost_health: false,
            actions: VecDeque::new(),
        };
        node.timer.jitter = node.draw_jitter();
        node
    }

    /// Its name in `from`, in votes and in the member set.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The current term; durable once the step's `Persist` has run (rule 2).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The role now; a leader may answer as one only while its lease lasts
    /// ([`View::is_leader_at`]).
    pub fn role(&self) -> Role {
        match self.state {
            State::Follower { .. } => Role::Follower,
            State::PreCandidate(_) => Role::PreCandidate,
            State::Candidate(_) => Role::Candidate,
            State::Leader(_) => Role::Leader,
        }
    }

    /// The member set its quorums are counted over (rule 1).
    pub fn members(&self) -> &MemberSet {
        &self.members
    }

    /// `h`, `L`, `T`, `P` and `r` as configured; every timer of the core derives from them.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// Every other member as this node knows it.
    pub fn peers(&self, now: Instant) -> Vec<Member> {
        self.peers
            .iter()
            .map(|p| self.peers.describe(p, now))
            .collect()
    }

    /// What a restart must find on disk (rule 3): the state of the latest `Persist` action.
    pub fn persistent(&self) -> Persistent {
        Persistent {
            term: self.term,
            voted_for: self.voted_for.clone(),
            promised: self.promised,
        }
    }

    /// Whether a stopping leader has anyone to hand over to (else it may exit at once).
    pub fn has_successor(&self, now: Instant) -> bool {
        self.best_successor(now).is_some()
    }

    /// What the shell publishes before it executes the step's actions (rule 9); `now` evaluates
    /// the lease, the guards and which members are live.
    pub fn view(&self, now: Instant) -> View {
        let (leader, heard, since, lease, until) = match &self.state {
            State::Follower { leader: Some(l) } => (
                Some(l.id.clone()),
                Some(l.heard_at),
                Some(l.since),
                None,
                Some(l.heard_at + l.silence),
            ),
            State::Leader(l) => (
                Some(self.id.clone()),
                Some(l.renewed_at),
                Some(l.since),
                Some(l.lease_until),
                Some(l.lease_until),
            ),
            _ => (None, None, None, None, None),
        };
        View {
            node_id: self.id.clone(),
            role: self.role(),
            term: self.term,
            leader,
            voted_for: self.voted_for.clone(),
            lease_until: lease,
            leader_until: until,
            leader_heard_at: heard,
            leader_since: since,
            priority: self.priority,
            eligible: self.eligible,
            candidacy: self.candidacy(now),
            can_campaign: self.can_campaign(now),
            can_vote: !self.booting(now) && self.peers.conflicts(now).is_empty(),
            config_conflicts: self.peers.conflicts(now),
            shutting_down: self.shutting_down,
            promise: self
                .voter
                .guard
                .as_ref()
                .filter(|g| now < g.until)
                .map(|g| (g.holder.clone(), g.until)),
            writes_version: self.wire_version(),
            maintenance: self.maintenance,
            healthy: self.healthy,
        }
    }

    /// The next action for the shell, in the order they must be executed.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the shell must call `handle(now, Input::Tick)` next at the latest: the earliest
    /// deadline of the timers that wake the node.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Timer::ALL
            .into_iter()
            .filter(|t| t.wakes())
            .filter_map(|t| self.deadline(t))
            .min()
    }

    /// Feeds one input. Commands may be refused; messages never are (they are just counted).
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<Outcome, CommandError> {
        self.last_input = now;
        // The previous step's actions have run: a round it started is on disk now.
        if let State::PreCandidate(r) | State::Candidate(r) = &mut self.state {
            r.durable = true;
        }
        // Maintenance before the timers due now: a node told to hold its campaigns must not start
        // one in the same step (rule 16; simulator seed 3632, a command queued behind a stall).
        if let Input::SetMaintenance { on } = &input {
            self.on_set_maintenance(now, *on);
        }
        // Time first: a node that wakes from a long pause must notice its lease ran out before it
        // does anything as leader.
        self.on_time(now);
        let result = match input {
            Input::Tick => Ok(Outcome::Accepted),
            Input::Message(m) => Ok(self.on_message(now, m)),
            Input::StepDown {
                successor,
                expected_term,
            } => self.on_step_down(now, successor, expected_term),
            Input::SetCandidacy { eligible, priority } => {
                self.on_set_candidacy(now, eligible, priority)
            }
            // Taken before the timers, above.
            Input::SetMaintenance { .. } => Ok(Outcome::Accepted),
            Input::Shutdown => {
                self.on_shutdown(now);
                Ok(Outcome::Accepted)
            }
            Input::SetHealth { healthy } => {
                self.on_set_health(now, healthy);
                Ok(Outcome::Accepted)
            }
            Input::ConfirmLeadership => self.on_confirm_leadership(now),
        };
        self.on_time(now);
        result
    }
}
