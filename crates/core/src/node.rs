//! The election state machine of one node. Every rule it implements is numbered in
//! docs/protocol.md; comments cite them as "rule N".
//!
//! Reading order: [`Node::handle`] (one input), [`Timer`] and [`Node::on_time`] (the timers, as
//! one table), [`Node::on_message`] (the wire), then the command handlers. State that only
//! exists in one role lives inside that role's variant of [`State`], so it cannot go stale when
//! the role changes.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::interface::{
    Action, CommandError, Config, Input, Member, Outcome, Persistent, Reason, Role,
    SuccessorRefused, Transition, View,
};
use super::membership::MemberSet;
use super::message::{Advert, Announced, Body, Candidacy, Message, Versions};
use super::peers::{Peer, Peers, Standing};
use super::rank::Rank;
use super::rng::Rng;
use super::timings::Timings;

/// How many resign messages an ex-leader repeats (one per heartbeat interval) so that one lost
/// message does not cost the successor a full election timeout (rule 10).
const RESIGN_REPEATS: u8 = 3;
use super::peers::FLAP_WINDOW;

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

/// A pre-vote or vote round this node runs for itself.
#[derive(Debug, Clone)]
struct Round {
    term: u64,
    /// Members with our member set that granted, this node included, each with the lease its
    /// promise supports (rule 6; this node's own vote supports the whole `L`).
    grants: BTreeMap<String, Duration>,
    /// When the request left: a lease built on these votes runs from here (rule 6).
    started: Instant,
    deadline: Instant,
    /// The shell has run the step that started the round, so the term and the self-vote are
    /// on disk (it runs a step's actions before the next input).
    durable: bool,
}

/// A heartbeat waiting for acknowledgements.
#[derive(Debug, Clone)]
struct PendingHeartbeat {
    seq: u64,
    sent_at: Instant,
    /// Who acked it (this node included), each with the lease its promise supports (rule 6).
    acks: BTreeMap<String, Duration>,
}

/// The lease a quorum of promises supports: the best quorum's weakest promise (rule 6). `None`
/// until a quorum answered.
fn quorum_lease(supports: &BTreeMap<String, Duration>, quorum: usize) -> Option<Duration> {
    let mut all: Vec<Duration> = supports.values().copied().collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    quorum.checked_sub(1).and_then(|i| all.get(i).copied())
}

#[derive(Debug, Clone)]
struct Leadership {
    since: Instant,
    /// The node leads only before this instant (rule 6).
    lease_until: Instant,
    /// The send time the lease was last renewed from.
    renewed_at: Instant,
    next_heartbeat: Instant,
    /// Heartbeats younger than the lease, oldest first.
    pending: VecDeque<PendingHeartbeat>,
}

/// The role and the state only that role has.
#[derive(Debug, Clone)]
enum State {
    Follower { leader: Option<KnownLeader> },
    PreCandidate(Round),
    Candidate(Round),
    Leader(Leadership),
}

/// A promise this node keeps for a leader's lease (rule 5): no vote for anyone else until
/// `until`.
#[derive(Debug, Clone)]
struct Guard {
    holder: String,
    until: Instant,
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

/// After a resign that named a successor, votes go only to it until `until` (rule 10).
#[derive(Debug, Clone)]
struct Favored {
    candidate: String,
    until: Instant,
}

/// A pre-vote we would grant but for a guard that is about to expire. Answering it the moment
/// the guard expires saves the candidate a whole retry after a leader crash, when the voters
/// heard the last heartbeat a few milliseconds after the candidate did.
#[derive(Debug, Clone)]
struct DeferredPreVote {
    candidate: String,
    priority: u32,
    term: u64,
    /// Dropped unanswered after `T`: the candidate's round is over by then.
    until: Instant,
}

/// What this node keeps as a voter, for the votes it gives or refuses others (rules 5, 10 and
/// 11); winning an election clears it.
#[derive(Debug, Clone, Default)]
struct Voter {
    /// The promise of its latest ack or vote: no vote for anyone else until it ends (rule 5).
    guard: Option<Guard>,
    /// The successor a resign named: votes go only to it for `T` (rule 10).
    favored: Option<Favored>,
    /// A pre-vote kept for a promise about to end (rule 10).
    deferred: Option<DeferredPreVote>,
    /// Rank vetoes this node has cast since it last knew a leader: rival id -> first veto.
    /// A rival that has not won within `T` of the first stops counting (the bounded veto,
    /// rule 11).
    vetoes: BTreeMap<String, Instant>,
}

/// The resign an ex-leader repeats while nobody leads yet.
#[derive(Debug, Clone)]
struct PendingResign {
    message: Message,
    repeats_left: u8,
}

/// When a follower campaigns: `wait` after `base`, plus the stagger of rule 11 and jitter; or at
/// once (`at_once`) when a resign named it.
#[derive(Debug, Clone)]
struct CampaignTimer {
    base: Instant,
    wait: Duration,
    jitter: Duration,
    at_once: Option<Instant>,
}

/// The core's timers, one per deadline (docs/protocol.md, "Timers"). [`Node::deadline`] is the
/// one place that says when each is due; [`Node::poll_timeout`] is the earliest deadline of those
/// that wake the node, and [`Node::on_time`] runs every due timer in the order of [`Timer::ALL`].
/// The order is part of the behaviour (a role change comes before what the new role does at the
/// same instant), and so part of every simulated run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// A candidate's round has a quorum of votes: it leads once the round is on disk (rule 3).
    /// Due at once: the round waits only for the actions of the step that started it.
    Won,
    /// The leader's lease ends with no quorum having renewed it: resign (rule 6, CheckQuorum).
    Lease,
    /// A follower's leader, unheard for the promise made to it, is gone (rules 5 and 11).
    LeaderSilence,
    /// A pre-vote or vote round that has not won by its deadline is abandoned.
    Round,
    /// Votes go only to the successor a resign named, for `T` (rule 10).
    Favored,
    /// No campaign of our own for `T` after resigning (rule 10).
    Cooldown,
    /// No vote and no campaign after a start, for the longest promise that may still hold
    /// (rule 8).
    StartupGuard,
    /// An unhealthy leader that has led for `T` hands over to a healthy member (rule 17).
    HealthyHandover,
    /// A leader that has led for `max(P, T)` hands over to a better-ranked member (rule 12).
    Preempt,
    /// A leader heartbeats every `h`, and four times as often while its lease is at risk
    /// (rule 6).
    Heartbeat,
    /// A pre-vote kept for a promise about to end is answered when the promise ends (rule 10).
    DeferredPreVote,
    /// A follower without a leader campaigns: `T` (or a shorter wait after a resign or a failed
    /// round) plus the rank stagger and jitter, once no guard or promise holds it (rule 11).
    Campaign,
    /// Every node but a leader announces itself when it has sent nothing for `h` (`2h` while
    /// it follows a leader, whose heartbeats it acks); a pending resign is repeated instead.
    Presence,
}

impl Timer {
    /// Every timer, in the order [`Node::on_time`] runs them.
    const ALL: [Timer; 13] = [
        Timer::Won,
        Timer::Lease,
        Timer::LeaderSilence,
        Timer::Round,
        Timer::Favored,
        Timer::Cooldown,
        Timer::StartupGuard,
        Timer::HealthyHandover,
        Timer::Preempt,
        Timer::Heartbeat,
        Timer::DeferredPreVote,
        Timer::Campaign,
        Timer::Presence,
    ];

    /// Whether the node wakes for it. The favored successor's end only narrows what the node
    /// does, and every use of it checks the time itself; the handovers are judged whenever a
    /// leader is awake, which it is every heartbeat interval at least.
    fn wakes(self) -> bool {
        !matches!(
            self,
            Timer::Favored | Timer::HealthyHandover | Timer::Preempt
        )
    }
}

/// A promise in whole milliseconds, rounded down: the leader counts no more than was promised.
fn floor_ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The election state machine of one node.
#[derive(Debug, Clone)]
pub struct Node {
    id: String,
    group: String,
    members: MemberSet,
    timings: Timings,
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
        };
        self.on_time(now);
        result
    }

    // ---- timers -------------------------------------------------------------------------

    /// When `timer` is due, if it is armed: the one place that lists the core's deadlines.
    fn deadline(&self, timer: Timer) -> Option<Instant> {
        let t = self.timings.election_timeout;
        match (timer, &self.state) {
            (Timer::Won, State::Candidate(r)) if r.grants.len() >= self.members.quorum() => {
                Some(r.started)
            }
            (Timer::Lease, State::Leader(l)) => Some(l.lease_until),
            (Timer::LeaderSilence, State::Follower { leader: Some(l) }) => {
                Some(l.heard_at + l.silence)
            }
            (Timer::Round, State::PreCandidate(r) | State::Candidate(r)) => Some(r.deadline),
            (Timer::Favored, _) => self.voter.favored.as_ref().map(|f| f.until),
            (Timer::Cooldown, _) => self.cooldown_until,
            (Timer::StartupGuard, _) => self.boot.map(|b| b.until),
            (Timer::HealthyHandover, State::Leader(l)) => Some(l.since + t),
            (Timer::Preempt, State::Leader(l)) if !self.timings.preempt_after.is_zero() => {
                Some(l.since + self.timings.preempt_after.max(t))
            }
            (Timer::Heartbeat, State::Leader(l)) => Some(l.next_heartbeat),
            // At the end of the promise that held it back; at once if none holds it any more.
            (Timer::DeferredPreVote, _) => self.voter.deferred.as_ref().map(|_| {
                self.voter
                    .guard
                    .as_ref()
                    .map_or(self.last_input, |g| g.until)
            }),
            (Timer::Campaign, _) => self.election_deadline(),
            (Timer::Presence, _) => Some(self.next_presence()),
            _ => None,
        }
    }

    /// Runs every due timer, in the order of [`Timer::ALL`]; each is judged after the ones
    /// before it ran, so a role given up here has no later timer of that role.
    fn on_time(&mut self, now: Instant) {
        for timer in Timer::ALL {
            let due = self.deadline(timer).is_some_and(|d| now >= d);
            match (timer, due) {
                (_, true) => self.on_timer(now, timer),
                // Candidacy changes are announced when they happen, not on a timer.
                (Timer::Presence, false) => self.announce_candidacy(now),
                (_, false) => {}
            }
        }
    }

    /// What a due timer does.
    fn on_timer(&mut self, now: Instant, timer: Timer) {
        match timer {
            Timer::Won => {
                if matches!(&self.state, State::Candidate(r) if r.durable) {
                    self.become_leader(now);
                }
            }
            Timer::Lease => {
                // Rule 6, CheckQuorum: no quorum acked within the lease; we may no longer lead.
                // Saying so (rule 10) frees the followers' guards at once.
                self.resign(now, None, Reason::LeaseExpired);
            }
            Timer::LeaderSilence => self.set_leader(now, None, Reason::LeaderTimeout),
            Timer::Round => {
                self.state = State::Follower { leader: None };
                self.reset_timer(now, self.retry_wait());
            }
            Timer::Favored => self.voter.favored = None,
            Timer::Cooldown => self.cooldown_until = None,
            Timer::StartupGuard => self.boot = None,
            Timer::HealthyHandover => self.maybe_yield_to_healthy(now),
            Timer::Preempt => self.maybe_preempt(now),
            Timer::Heartbeat => self.send_heartbeat(now),
            Timer::DeferredPreVote => self.answer_deferred(now),
            Timer::Campaign => {
                if self.may_start_campaign(now) {
                    self.start_pre_vote(now);
                }
            }
            Timer::Presence => {
                if !matches!(self.state, State::Leader(_)) && !self.repeat_resign(now) {
                    self.send_presence(now);
                }
            }
        }
    }

    /// Tells the others at once when this node's candidacy changed (a leader's heartbeats do).
    fn announce_candidacy(&mut self, now: Instant) {
        if !matches!(self.state, State::Leader(_)) && self.advertised != Some(self.candidacy(now)) {
            self.send_presence(now);
        }
    }

    /// Repeats a pending resign instead of a presence, while nobody leads in its term yet.
    fn repeat_resign(&mut self, now: Instant) -> bool {
        let Some(p) = self.pending_resign.take() else {
            return false;
        };
        let nobody_leads = matches!(self.state, State::Follower { leader: None });
        if p.repeats_left == 0 || !nobody_leads || p.message.term != self.term {
            return false;
        }
        let mut again = p.message.clone();
        again.seq = self.take_seq();
        // Written in what the members read now: a member may have been heard on another build
        // since the first copy left (rule 15; simulator seed 2733, a downgrade).
        again.v = self.wire_version();
        self.publish(now, again);
        self.pending_resign = Some(PendingResign {
            message: p.message,
            repeats_left: p.repeats_left - 1,
        });
        true
    }

    /// Every node is heard at least every heartbeat interval: a follower through its acks, so
    /// it only announces itself when the heartbeats it answers are late.
    fn next_presence(&self) -> Instant {
        let h = self.timings.heartbeat;
        let every = match self.state {
            State::Follower { leader: Some(_) } => h * 2,
            _ => h,
        };
        self.last_sent.map_or(self.timer.base, |s| s + every)
    }

    fn draw_jitter(&mut self) -> Duration {
        // Smaller than the stagger so that jitter never reorders two ranks.
        let max = (self.timings.stagger / 5).max(self.timings.heartbeat / 10);
        Duration::from_nanos(self.rng.below(max.as_nanos() as u64))
    }

    fn reset_timer(&mut self, now: Instant, wait: Duration) {
        self.timer = CampaignTimer {
            base: now,
            wait,
            jitter: self.draw_jitter(),
            at_once: None,
        };
    }

    /// After a failed round. Pre-votes change nothing anywhere, so retrying often is cheap.
    fn retry_wait(&self) -> Duration {
        self.timings.heartbeat
    }

    fn booting(&self, now: Instant) -> bool {
        self.boot.is_some_and(|b| now < b.until)
    }

    fn cooling(&self, now: Instant) -> bool {
        self.cooldown_until.is_some_and(|c| now < c)
    }

    fn can_campaign(&self, now: Instant) -> bool {
        self.eligible
            && !self.shutting_down
            && !self.booting(now)
            && !self.cooling(now)
            && !self.config_conflict(now)
            && !self.held_by_maintenance(now)
    }

    /// Whether a due campaign timer may start a campaign. The deadline already waits out all
    /// of it (eligibility, a stop, maintenance, the start-up guard, the cooldown, a member-set
    /// conflict, a promise to another), so this holds whenever the timer is due; it stays as
    /// the last word, so that a deadline that forgot one cannot start a campaign: our own vote
    /// counts like any other, never while it may be holding up someone's lease.
    fn may_start_campaign(&self, now: Instant) -> bool {
        self.can_campaign(now) && self.may_vote(now, &self.id.clone())
    }

    /// Rule 16: in maintenance only a member a leader's resign named campaigns, for as long as
    /// it is favored (`T`).
    fn held_by_maintenance(&self, now: Instant) -> bool {
        self.maintenance
            && !self
                .voter
                .favored
                .as_ref()
                .is_some_and(|f| f.candidate == self.id && now < f.until)
    }

    /// Rule 1: a live member lists members more than one id away from ours.
    fn config_conflict(&self, now: Instant) -> bool {
        self.peers.conflict_until().is_some_and(|u| now < u)
    }

    /// Candidacy as others should rank it (rule 11).
    fn candidacy(&self, now: Instant) -> Candidacy {
        if self.shutting_down {
            Candidacy::Stopping
        } else if !self.eligible {
            Candidacy::Withdrawn
        } else if self.booting(now) {
            Candidacy::Booting
        } else if self.cooling(now) {
            Candidacy::Cooling
        } else {
            Candidacy::Eligible
        }
    }

    /// A leader that resigned in our current term stays out of the ranking until a new term.
    fn resigned_in_this_term(&self, id: &str) -> bool {
        self.resigned
            .as_ref()
            .is_some_and(|r| r.leader == id && r.term == self.term)
    }

    /// This node's own standing, as the others see it as far as it can tell (rule 12).
    fn me(&self, now: Instant) -> Standing<'_> {
        Standing {
            healthy: self.healthy,
            steady: self.flapped_at.is_none_or(|f| now >= f + self.flap_window),
            rank: Rank::new(self.priority, &self.id),
        }
    }

    /// Members whose candidacy makes a lower-ranked node wait its stagger (rule 11): they could
    /// win (two-way, hearing a quorum, same members; liveness is checked by the caller) and are
    /// eligible or about to be.
    fn stagger_rival(&self, p: &Peer) -> bool {
        matches!(
            p.candidacy,
            Some(Candidacy::Eligible) | Some(Candidacy::Booting)
        ) && self.peers.could_win(p)
            && !self.resigned_in_this_term(&p.id)
    }

    /// When a follower campaigns, if nothing else happens first: `T` (or a shorter wait after a
    /// resign or a failed round) plus `W` per rival that outranks it, plus jitter. Rivals drop
    /// out of that count as they go silent, so the deadline is the first instant at which the
    /// wait covers the rivals still live then. Exact, so the shell can sleep until it.
    fn election_deadline(&self) -> Option<Instant> {
        if !matches!(self.state, State::Follower { leader: None })
            || !self.eligible
            || self.shutting_down
            || self.held_by_maintenance(self.last_input)
        {
            return None;
        }
        // Not before the start-up guard, the cooldown and a promise to someone else end.
        let promised = self
            .voter
            .guard
            .as_ref()
            .filter(|g| g.holder != self.id)
            .map(|g| g.until);
        let floor = [
            self.boot.map(|b| b.until),
            self.cooldown_until,
            promised,
            self.peers.conflict_until(),
        ]
        .into_iter()
        .flatten()
        .max();
        let floor = floor.unwrap_or(self.timer.base);
        if let Some(at) = self.timer.at_once {
            return Some(at.max(floor));
        }
        let base = self.timer.base + self.timer.wait + self.timer.jitter;
        let me = self.me(self.last_input);
        let mut expiries: Vec<Instant> = self
            .peers
            .iter()
            .filter(|p| {
                self.stagger_rival(p) && self.peers.standing(p, self.last_input).outranks(&me)
            })
            .filter_map(|p| self.peers.live_until(p))
            .filter(|e| *e > base)
            .collect();
        expiries.sort();
        let n = expiries.len();
        let mut lo = base;
        for i in 0..=n {
            let candidate = lo.max(base + self.timings.stagger * (n - i) as u32);
            match expiries.get(i) {
                Some(hi) if candidate >= *hi => lo = *hi,
                _ => return Some(candidate.max(floor)),
            }
        }
        Some(lo.max(floor))
    }

    // ---- sending ----------------------------------------------------------------------

    fn take_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    fn message_for_term(&mut self, term: u64, body: Body) -> Message {
        Message {
            v: self.wire_version(),
            group: self.group.clone(),
            from: self.id.clone(),
            term,
            seq: self.take_seq(),
            ts: 0,
            members: self.members.fingerprint().to_string(),
            // Also in a version-2 message: older builds ignore fields they do not know, and
            // newer ones read them whatever the version (rule 15).
            speaks: Some(Versions::OURS),
            timings: Some(Announced::of(&self.timings)),
            body,
            info: None,
            maintenance: None,
            observer: false,
            kid: None,
            sig: None,
        }
    }

    /// Rule 15: the newest version every member speaks. A member not heard yet may be of the
    /// previous build, so it counts as speaking only our oldest version: writing the oldest
    /// costs nothing (this build's messages of either version carry the same fields, and it
    /// reads both), while writing a version a member cannot read makes it deaf to us. A member
    /// that speaks nothing we do cannot read us either way and is left out.
    fn wire_version(&self) -> u32 {
        let ours = Versions::OURS;
        self.peers
            .iter()
            .map(|p| p.speaks.map_or(ours.oldest, |v| v.newest))
            .filter(|&v| v >= ours.oldest)
            .fold(ours.newest, u32::min)
    }

    fn message(&mut self, body: Body) -> Message {
        self.message_for_term(self.term, body)
    }

    fn publish(&mut self, now: Instant, m: Message) {
        self.last_sent = Some(now);
        self.actions.push_back(Action::Publish(m));
    }

    fn persist(&mut self) {
        self.actions.push_back(Action::Persist(self.persistent()));
    }

    /// Our rank, candidacy, the members we hear and our member set, for the next heartbeat,
    /// ack or presence.
    fn advert(&mut self, now: Instant) -> Advert {
        let candidacy = self.candidacy(now);
        self.advertised = Some(candidacy);
        Advert {
            priority: self.priority,
            candidacy,
            hears: self.peers.hearing(now),
            member_ids: self.members.ids().map(str::to_string).collect(),
            flapped: !self.me(now).steady,
            unhealthy: !self.healthy,
        }
    }

    fn send_presence(&mut self, now: Instant) {
        let advert = self.advert(now);
        let m = self.message(Body::Presence { advert });
        self.publish(now, m);
    }

    fn send_heartbeat(&mut self, now: Instant) {
        let body = Body::Heartbeat {
            leader: self.id.clone(),
            timestamp: 0,
            lease_ms: self.timings.lease.as_millis() as u64,
            advert: self.advert(now),
        };
        let m = self.message(body);
        let quorum = self.members.quorum();
        let (lease, interval) = (self.timings.lease, self.timings.heartbeat);
        if let State::Leader(l) = &mut self.state {
            let acks = BTreeMap::from([(self.id.clone(), lease)]);
            if acks.len() >= quorum {
                // A cluster of one is its own quorum.
                l.lease_until = l.lease_until.max(now + lease);
                l.renewed_at = now;
            }
            l.pending.push_back(PendingHeartbeat {
                seq: m.seq,
                sent_at: now,
                acks,
            });
            while l.pending.front().is_some_and(|p| p.sent_at + lease <= now) {
                l.pending.pop_front();
            }
            // A lease that was not renewed by the previous heartbeat is at risk: retry at four
            // times the rate until a quorum answers, so a few lost messages do not depose a
            // healthy leader.
            let at_risk = l.lease_until.saturating_duration_since(now) < interval * 2;
            l.next_heartbeat = now + if at_risk { interval / 4 } else { interval };
        }
        self.publish(now, m);
    }

    /// An ack that promises `guard` (rule 5); the guard itself was set by [`Node::follow`].
    fn send_ack(&mut self, now: Instant, leader: &str, hb_seq: u64, guard: Duration) {
        let _ = self.record_promise(now, guard);
        let body = Body::Ack {
            leader: leader.to_string(),
            hb_seq,
            guard_ms: Some(floor_ms(guard)),
            advert: self.advert(now),
        };
        let m = self.message(body);
        self.publish(now, m);
    }

    /// Rule 8: before a promise leaves, the longest promise still running is on disk, so that
    /// the start-up guard after a crash outlasts it, even when the node comes back with a
    /// shorter `T` (a rolling timing change: simulator seed 4493 voted 262 ms after a restart
    /// while its 3 s promise of the run before still held). Promises that ended no longer count,
    /// so the recorded length comes down again once the long ones are over (written with the
    /// next promise: writing it late errs on the long side). In steady state every promise has
    /// the same length, so this writes once per run.
    fn record_promise(&mut self, now: Instant, guard: Duration) -> bool {
        self.promises.retain(|_, until| *until > now);
        let until = self.promises.entry(guard).or_insert(now);
        *until = (*until).max(now + guard);
        let longest = self.promises.keys().next_back().copied();
        if longest == self.promised {
            return false;
        }
        self.promised = longest;
        self.persist();
        true
    }

    // ---- state changes ----------------------------------------------------------------

    fn known_leader(&self) -> Option<&str> {
        match &self.state {
            State::Follower { leader: Some(l) } => Some(&l.id),
            State::Leader(_) => Some(&self.id),
            _ => None,
        }
    }

    /// Records a change of the known leader for the shell (history, metrics, logs).
    fn transition(&mut self, previous: Option<String>, leader: Option<String>, reason: Reason) {
        if previous == leader {
            return;
        }
        self.actions.push_back(Action::Transition(Transition {
            term: self.term,
            leader,
            previous,
            reason,
        }));
    }

    /// Sets (or forgets) the leader of a follower; any round in progress is abandoned.
    fn set_leader(&mut self, now: Instant, leader: Option<String>, reason: Reason) {
        let previous = self.known_leader().map(str::to_string);
        let known = match (&self.state, leader.clone()) {
            (_, None) => None,
            (State::Follower { leader: Some(l) }, Some(id)) if l.id == id => Some(KnownLeader {
                heard_at: now,
                ..l.clone()
            }),
            (_, Some(id)) => Some(KnownLeader {
                id,
                heard_at: now,
                since: now,
                silence: self.timings.election_timeout,
            }),
        };
        self.state = State::Follower { leader: known };
        self.transition(previous, leader, reason);
    }

    /// Leaves the leader role. The caller announces it afterwards, if at all: the shell
    /// publishes the resulting view before any message of this step leaves (rule 9).
    fn stop_leading(&mut self, now: Instant, reason: Reason) {
        if matches!(self.state, State::Leader(_)) {
            self.set_leader(now, None, reason);
            self.reset_timer(now, self.timings.election_timeout);
        }
    }

    fn adopt_term(&mut self, now: Instant, term: u64) {
        debug_assert!(term > self.term);
        let was_leader = matches!(self.state, State::Leader(_));
        let previous = self.known_leader().map(str::to_string);
        self.term = term;
        self.voted_for = None;
        self.state = State::Follower { leader: None };
        if was_leader {
            self.reset_timer(now, self.timings.election_timeout);
        }
        self.transition(previous, None, Reason::HigherTerm);
        self.persist();
    }

    // ---- campaigning (rule 4) -------------------------------------------------------

    fn start_pre_vote(&mut self, now: Instant) {
        let term = self.term + 1;
        self.state = State::PreCandidate(Round {
            term,
            grants: BTreeMap::from([(self.id.clone(), self.timings.lease)]),
            started: now,
            deadline: now + self.timings.heartbeat * 2,
            durable: false,
        });
        self.timer.at_once = None;
        if self.members.quorum() <= 1 {
            self.start_election(now);
            return;
        }
        let body = Body::Election {
            candidate: self.id.clone(),
            priority: self.priority,
            pre_vote: true,
        };
        let m = self.message_for_term(term, body);
        self.publish(now, m);
    }

    fn start_election(&mut self, now: Instant) {
        self.term += 1;
        self.voted_for = Some(self.id.clone());
        self.persist();
        self.state = State::Candidate(Round {
            term: self.term,
            grants: BTreeMap::from([(self.id.clone(), self.timings.lease)]),
            started: now,
            deadline: now + self.timings.election_timeout / 2,
            durable: false,
        });
        if self.members.quorum() <= 1 {
            // Its own vote is a quorum: it leads at the next tick, once the term is on disk
            // (rule 3), never before.
            return;
        }
        let body = Body::Election {
            candidate: self.id.clone(),
            priority: self.priority,
            pre_vote: false,
        };
        let m = self.message(body);
        self.publish(now, m);
    }

    fn become_leader(&mut self, now: Instant) {
        let State::Candidate(round) = &self.state else {
            return;
        };
        // Rule 6: the lease runs from when the election left this node; every vote came after.
        // It lasts as long as the quorum's promises support.
        let started = round.started;
        let lease = quorum_lease(&round.grants, self.members.quorum()).unwrap_or_default();
        let lease_until = started + lease;
        if now >= lease_until {
            self.state = State::Follower { leader: None };
            self.reset_timer(now, self.retry_wait());
            return;
        }
        self.state = State::Leader(Leadership {
            since: now,
            lease_until,
            renewed_at: started,
            next_heartbeat: now,
            pending: VecDeque::new(),
        });
        self.resigned = None;
        // A leader votes for nobody: its promise, a favored successor and its vetoes are over.
        self.voter = Voter::default();
        self.pending_resign = None;
        self.transition(None, Some(self.id.clone()), Reason::Elected);
        let body = Body::Leader {
            leader: self.id.clone(),
            elected_at: 0,
        };
        let m = self.message(body);
        self.publish(now, m);
        self.send_heartbeat(now);
    }

    // ---- receiving --------------------------------------------------------------------

    fn on_message(&mut self, now: Instant, m: Message) -> Outcome {
        if m.group != self.group || m.from == self.id || !Versions::OURS.speaks(m.v) {
            return Outcome::Ignored;
        }
        // Rule 1: a node outside our member set changes nothing, not even our term.
        if !self.members.contains(&m.from) {
            return Outcome::NotMember;
        }
        let same_members = m.members == self.members.fingerprint();
        self.peers.heard(now, &m);
        if same_members {
            self.release_boot_guard(&m);
        }
        let counted = matches!(
            m.body,
            Body::Election { .. } | Body::Vote { .. } | Body::Ack { .. }
        );
        if counted && !same_members {
            // Rule 1: votes, acks and candidacies only count between equal member sets.
            return Outcome::OtherMembers;
        }
        match &m.body {
            Body::Election {
                pre_vote: true,
                candidate,
                priority,
            } => {
                let (candidate, priority) = (candidate.clone(), *priority);
                return self.on_pre_vote_request(now, m.term, &candidate, priority);
            }
            Body::Vote {
                pre_vote: true,
                candidate,
                granted,
                ..
            } => {
                if *candidate != self.id || !*granted {
                    return Outcome::Ignored;
                }
                let lease = self.timings.lease;
                return self.on_grant(now, m.term, &m.from, Role::PreCandidate, lease);
            }
            _ => {}
        }
        if m.term > self.term {
            if matches!(m.body, Body::Election { .. }) && !self.may_vote(now, &m.from) {
                // Leader stickiness: a live leader (or our boot guard) wins over a candidate.
                return Outcome::Ignored;
            }
            self.adopt_term(now, m.term);
        } else if m.term < self.term {
            return Outcome::Stale;
        }
        let theirs = m.timings;
        match m.body {
            Body::Heartbeat { lease_ms, .. } => {
                let lease = Duration::from_millis(lease_ms);
                let promise = self.timings.promise_to(theirs.as_ref(), Some(lease));
                let o = self.follow(now, &m.from, same_members, promise);
                if o == Outcome::Accepted {
                    self.send_ack(now, &m.from, m.seq, promise);
                }
                o
            }
            Body::Leader { .. } => {
                let promise = self.timings.promise_to(theirs.as_ref(), None);
                self.follow(now, &m.from, same_members, promise)
            }
            Body::Ack {
                leader,
                hb_seq,
                guard_ms,
                ..
            } => {
                if leader != self.id {
                    return Outcome::Ignored;
                }
                let support = self.support(guard_ms, theirs.as_ref());
                self.on_ack(now, &m.from, hb_seq, support)
            }
            Body::Presence { .. } => Outcome::Accepted,
            Body::Election {
                candidate,
                priority,
                ..
            } => {
                let promise = self.timings.promise_to(theirs.as_ref(), None);
                self.on_vote_request(now, &candidate, priority, promise)
            }
            Body::Vote {
                candidate,
                granted,
                guard_ms,
                ..
            } => {
                if candidate != self.id || !granted {
                    return Outcome::Ignored;
                }
                let support = self.support(guard_ms, theirs.as_ref());
                self.on_grant(now, m.term, &m.from, Role::Candidate, support)
            }
            Body::Resign {
                successor,
                lost_quorum,
                ..
            } => self.on_resign(now, &m.from, successor, lost_quorum),
        }
    }

    /// Rule 8: the start-up guard stands in for promises made before a restart, all of them to
    /// leaders and candidates of terms up to the one persisted at start. The resign of a leader
    /// of that term or a later one ends it: that leader stopped leading before it said so, and
    /// its election proved every earlier lease over. (Following a leader ends it too: see
    /// [`Node::follow`].) Only a sender with our member set counts: "its election proved" rests
    /// on its quorum sharing a node with every quorum of ours, which sets two ids apart do not
    /// promise (rule 1).
    fn release_boot_guard(&mut self, m: &Message) {
        let Some(b) = self.boot else {
            return;
        };
        if matches!(m.body, Body::Resign { .. }) && m.term >= b.term {
            self.boot = None;
        }
    }

    /// Rule 6: the lease a voter's promise supports. A promise of version 2, which does not say
    /// how long it is, is the leader's own `T`: that build runs on the timings of the cluster.
    fn support(&self, guard_ms: Option<u64>, theirs: Option<&Announced>) -> Duration {
        let guard = guard_ms.map_or(self.timings.election_timeout, Duration::from_millis);
        let drift = theirs.map_or(self.timings.max_drift, Announced::max_drift);
        self.timings.lease_on(guard, drift)
    }

    /// A heartbeat or victory declaration from `from` in our term; `same_members` when its
    /// member set is ours; `promise` what following it promises (rule 5).
    fn follow(
        &mut self,
        now: Instant,
        from: &str,
        same_members: bool,
        promise: Duration,
    ) -> Outcome {
        if matches!(self.state, State::Leader(_)) {
            // Two leaders in one term cannot happen; never yield to an impostor of our term.
            return Outcome::Ignored;
        }
        if self.resigned_in_this_term(from) {
            // A heartbeat that was overtaken by its sender's resignation.
            return Outcome::Stale;
        }
        if let Some(l) = self.known_leader() {
            if l != from {
                return Outcome::Ignored;
            }
        }
        // A deferred pre-vote stays: this heartbeat may have been sent just before the leader's
        // resign, which the candidate's request overtook (rule 10). It is answered only once
        // no guard stands, so a leader that goes on leading never lets it through.
        self.voter.favored = None;
        self.voter.vetoes.clear();
        self.set_leader(now, Some(from.to_string()), Reason::Elected);
        if let State::Follower { leader: Some(l) } = &mut self.state {
            l.silence = promise;
        }
        // Rule 5: our ack (sent by the caller) may renew its lease; no other vote while the
        // promise lasts: our T, or the leader's if that is longer.
        self.voter.guard = Some(Guard {
            holder: from.to_string(),
            until: now + promise,
        });
        // Rule 8: this leader's term is at least the one persisted at start, so every lease of
        // an earlier term is over, and a promise made before the restart to this leader (the
        // only one of its term) is replaced by the guard just set, which lasts longer. That
        // needs its electing quorum to share a node with ours: only with our member set.
        if same_members {
            self.boot = None;
        }
        self.reset_timer(now, self.timings.election_timeout);
        Outcome::Accepted
    }

    fn on_ack(&mut self, now: Instant, from: &str, hb_seq: u64, support: Duration) -> Outcome {
        let quorum = self.members.quorum();
        let State::Leader(l) = &mut self.state else {
            return Outcome::Stale;
        };
        let Some(p) = l.pending.iter_mut().find(|p| p.seq == hb_seq) else {
            return Outcome::Stale;
        };
        debug_assert!(p.sent_at <= now, "an ack cannot come before its heartbeat");
        p.acks.insert(from.to_string(), support);
        if let Some(lease) = quorum_lease(&p.acks, quorum) {
            // Rule 6: from the heartbeat's send time, which every ack came after, for as long
            // as the quorum's promises support.
            let until = p.sent_at + lease;
            if until > l.lease_until {
                l.lease_until = until;
                l.renewed_at = p.sent_at;
            }
        }
        Outcome::Accepted
    }

    fn on_grant(
        &mut self,
        now: Instant,
        term: u64,
        from: &str,
        stage: Role,
        support: Duration,
    ) -> Outcome {
        if self.role() != stage {
            return Outcome::Stale;
        }
        let quorum = self.members.quorum();
        let (State::PreCandidate(r) | State::Candidate(r)) = &mut self.state else {
            return Outcome::Stale;
        };
        if r.term != term {
            return Outcome::Stale;
        }
        r.grants.insert(from.to_string(), support);
        if r.grants.len() >= quorum && (r.durable || stage == Role::PreCandidate) {
            match stage {
                Role::PreCandidate => self.start_election(now),
                _ => self.become_leader(now),
            }
        }
        Outcome::Accepted
    }

    /// Whether this node may vote for `candidate` now, whatever the term and rank: not starting
    /// up (rule 8), not leading, and no lease our silence protects but the candidate's (rule 5).
    fn may_vote(&self, now: Instant, candidate: &str) -> bool {
        if self.booting(now) || self.config_conflict(now) || matches!(self.state, State::Leader(_))
        {
            return false;
        }
        match &self.voter.guard {
            Some(g) if now < g.until => g.holder == candidate,
            _ => true,
        }
    }

    /// Whoever this node would rather see lead than `candidate` (rule 10, rule 11): the favored
    /// successor of a recent resign, or a rival that outranks it and could win. `None` when the
    /// candidate is acceptable.
    fn veto(&self, now: Instant, candidate: &str, priority: u32) -> Option<String> {
        self.veto_ignoring(now, candidate, priority, None)
    }

    /// [`Node::veto`], leaving `ignored` out of the rivals.
    fn veto_ignoring(
        &self,
        now: Instant,
        candidate: &str,
        priority: u32,
        ignored: Option<&str>,
    ) -> Option<String> {
        if let Some(f) = &self.voter.favored {
            if now < f.until {
                return (f.candidate != candidate).then(|| f.candidate.clone());
            }
        }
        let known = self.peers.get(candidate);
        let them = Standing {
            healthy: known.is_none_or(|p| !p.says_unhealthy),
            steady: known.is_none_or(|p| !self.peers.flapped(p, now)),
            rank: Rank::new(priority, candidate),
        };
        let t = self.timings.election_timeout;
        let spent = |id: &str| self.voter.vetoes.get(id).is_some_and(|s| now >= *s + t);
        if self.can_campaign(now) && self.me(now).outranks(&them) && !spent(&self.id) {
            return Some(self.id.clone());
        }
        self.peers
            .iter()
            .filter(|p| p.id != candidate && Some(p.id.as_str()) != ignored && !spent(&p.id))
            .filter(|p| p.candidacy == Some(Candidacy::Eligible) && self.peers.viable(p, now))
            .filter(|p| !self.resigned_in_this_term(&p.id))
            .find(|p| self.peers.standing(p, now).outranks(&them))
            .map(|p| p.id.clone())
    }

    /// The veto, remembered so that a rival which cannot win stops blocking after `T`.
    fn cast_veto(&mut self, now: Instant, candidate: &str, priority: u32) -> bool {
        match self.veto(now, candidate, priority) {
            Some(rival) => {
                let favored = self
                    .voter
                    .favored
                    .as_ref()
                    .is_some_and(|f| f.candidate == rival);
                if !favored {
                    self.voter.vetoes.entry(rival).or_insert(now);
                }
                true
            }
            None => false,
        }
    }

    fn on_pre_vote_request(
        &mut self,
        now: Instant,
        term: u64,
        candidate: &str,
        priority: u32,
    ) -> Outcome {
        if term <= self.term {
            return Outcome::Stale;
        }
        if self.may_vote(now, candidate) && !self.cast_veto(now, candidate, priority) {
            self.grant_pre_vote(now, candidate, term);
            return Outcome::Accepted;
        }
        // The silent leader still counts as live until the same moment its guard expires, so
        // judge the candidate as of then.
        // Kept while the guard's holder is the leader we follow, too: if its resign arrives
        // after this request (a handover racing ahead of it), the answer goes out at once
        // instead of costing the successor a whole round (rule 10), even when a heartbeat the
        // leader sent just before its resign lands in between. It lapses after T. That leader
        // is no rival here, however it ranks: the request is only kept for its resign, and
        // answered only once its guard is gone (`answer_deferred` judges the rank again then).
        if let Some((until, holder)) = self
            .voter
            .guard
            .as_ref()
            .map(|g| (g.until, g.holder.clone()))
        {
            let soon = until <= now + self.timings.heartbeat;
            let leader_holds = self.known_leader() == Some(holder.as_str());
            let defer = !matches!(self.state, State::Leader(_))
                && self.boot.is_none_or(|b| until >= b.until)
                && (soon || leader_holds)
                && self
                    .veto_ignoring(until, candidate, priority, Some(&holder))
                    .is_none();
            if defer {
                self.voter.deferred = Some(DeferredPreVote {
                    candidate: candidate.to_string(),
                    priority,
                    term,
                    until: now + self.timings.election_timeout,
                });
            }
        }
        Outcome::Ignored
    }

    fn grant_pre_vote(&mut self, now: Instant, candidate: &str, term: u64) {
        let body = Body::Vote {
            candidate: candidate.to_string(),
            granted: true,
            pre_vote: true,
            guard_ms: None,
        };
        let reply = self.message_for_term(term, body);
        self.publish(now, reply);
    }

    /// Due once no promise holds the deferred pre-vote back ([`Timer::DeferredPreVote`]).
    fn answer_deferred(&mut self, now: Instant) {
        if let Some(d) = self.voter.deferred.take() {
            if now < d.until
                && d.term > self.term
                && self.may_vote(now, &d.candidate)
                && !self.cast_veto(now, &d.candidate, d.priority)
            {
                self.grant_pre_vote(now, &d.candidate, d.term);
            }
        }
    }

    fn on_vote_request(
        &mut self,
        now: Instant,
        candidate: &str,
        priority: u32,
        promise: Duration,
    ) -> Outcome {
        // Terms are equal here (a higher one was adopted by the caller).
        let already = self.voted_for.clone();
        let granted = match &already {
            // Rule 3: one vote per term.
            Some(v) => v == candidate,
            None => {
                matches!(self.state, State::Follower { .. } | State::PreCandidate(_))
                    && self.may_vote(now, candidate)
                    && !self.cast_veto(now, candidate, priority)
            }
        };
        if !granted {
            return Outcome::Ignored;
        }
        if matches!(self.state, State::PreCandidate(_)) {
            self.state = State::Follower { leader: None };
        }
        // Rule 5: while the promise lasts (our T, or the candidate's if longer), the lease the
        // candidate may build on our vote is protected.
        self.voter.guard = Some(Guard {
            holder: candidate.to_string(),
            until: now + promise,
        });
        if already.is_none() {
            self.voted_for = Some(candidate.to_string());
        }
        // Rule 3: the vote (and rule 8: the promise) durable before the vote leaves (the shell
        // executes actions in order); one write for both.
        if !self.record_promise(now, promise) && already.is_none() {
            self.persist();
        }
        self.reset_timer(now, self.timings.election_timeout);
        let body = Body::Vote {
            candidate: candidate.to_string(),
            granted: true,
            pre_vote: false,
            guard_ms: Some(floor_ms(promise)),
        };
        let reply = self.message(body);
        self.publish(now, reply);
        Outcome::Accepted
    }

    fn on_resign(
        &mut self,
        now: Instant,
        from: &str,
        successor: Option<String>,
        lost_quorum: bool,
    ) -> Outcome {
        if self.resigned_in_this_term(from) {
            return Outcome::Stale;
        }
        if matches!(self.state, State::Leader(_)) {
            return Outcome::Ignored;
        }
        self.resigned = Some(Resigned {
            leader: from.to_string(),
            term: self.term,
        });
        if self.voter.guard.as_ref().is_some_and(|g| g.holder == from) {
            // Rule 10: the leader stopped leading before it said so; its lease needs us no more.
            self.voter.guard = None;
        }
        let reason = if successor.is_some() {
            Reason::Transfer
        } else {
            Reason::StepDown
        };
        if self.known_leader() == Some(from) {
            self.set_leader(now, None, reason);
        }
        // A leader that could not keep its quorum is demoted like one that crashed (rule 12), so
        // leadership does not go back to a node with a bad link again and again.
        self.peers.resigned(now, from, lost_quorum);
        let t = self.timings.election_timeout;
        // Rule 10: a successor is favored only if it can win here: a member whose member set is
        // ours. One named across a membership change (the ex-leader still lists it, we do not,
        // or it lists other members) could not collect our quorum, and favoring it would only
        // block every other candidate for T.
        let successor = successor.filter(|s| {
            s == &self.id
                || self
                    .peers
                    .get(s)
                    .is_some_and(|p| p.fingerprint.as_deref() == Some(self.members.fingerprint()))
        });
        match successor {
            Some(s) if s == self.id => {
                // Named by the leader (or its operator): campaign at once, cooldown or not.
                self.cooldown_until = None;
                self.voter.favored = Some(Favored {
                    candidate: s,
                    until: now + t,
                });
                self.reset_timer(now, Duration::ZERO);
                self.timer.at_once = Some(now);
            }
            Some(s) => {
                self.voter.favored = Some(Favored {
                    candidate: s,
                    until: now + t,
                });
                self.reset_timer(now, t);
            }
            None => {
                self.voter.favored = None;
                self.reset_timer(now, Duration::ZERO);
            }
        }
        Outcome::Accepted
    }

    // ---- commands ---------------------------------------------------------------------

    fn leading(&self, now: Instant) -> bool {
        matches!(&self.state, State::Leader(l) if now < l.lease_until)
    }

    /// Stops leading, then tells everyone, then cools down for `T` (rules 9 and 10).
    fn resign(&mut self, now: Instant, successor: Option<String>, reason: Reason) {
        self.stop_leading(now, reason);
        self.resigned = Some(Resigned {
            leader: self.id.clone(),
            term: self.term,
        });
        let t = self.timings.election_timeout;
        self.cooldown_until = Some(now + t);
        if reason == Reason::LeaseExpired {
            // The others count a resign for a lost quorum as a flap (rule 12).
            self.flapped_at = Some(now);
        }
        // The resign itself tells the others we cool down.
        self.advertised = Some(self.candidacy(now));
        self.voter.favored = successor.clone().map(|s| Favored {
            candidate: s,
            until: now + t,
        });
        let body = Body::Resign {
            leader: self.id.clone(),
            successor,
            lost_quorum: reason == Reason::LeaseExpired,
        };
        let m = self.message(body);
        self.pending_resign = Some(PendingResign {
            message: m.clone(),
            repeats_left: RESIGN_REPEATS,
        });
        self.publish(now, m);
    }

    /// The best member to hand over to: one that could win now or the moment our resign
    /// releases its start-up guard.
    fn best_successor(&self, now: Instant) -> Option<String> {
        self.peers
            .iter()
            .filter(|p| {
                matches!(
                    p.candidacy,
                    Some(Candidacy::Eligible) | Some(Candidacy::Booting)
                ) && self.peers.viable(p, now)
            })
            .max_by(|a, b| {
                self.peers
                    .standing(a, now)
                    .cmp(&self.peers.standing(b, now))
            })
            .map(|p| p.id.clone())
    }

    /// Whether `s` could win an election now, or the moment our resign releases its start-up
    /// guard (rule 10); the first check it fails if not.
    fn check_successor(&self, now: Instant, s: &str) -> Result<(), SuccessorRefused> {
        let heard_within_ms = self.timings.heartbeat.as_millis() as u64;
        if s == self.id {
            return Err(SuccessorRefused::Itself);
        }
        if !self.members.contains(s) {
            return Err(SuccessorRefused::NotMember {
                members: self.members.to_string(),
            });
        }
        let p = self.peers.get(s).expect("every member has an entry");
        let Some(seen) = p.last_seen else {
            return Err(SuccessorRefused::NeverHeard { heard_within_ms });
        };
        if !self.peers.live(p, now) {
            return Err(SuccessorRefused::Silent {
                silent_ms: now.duration_since(seen).as_millis() as u64,
                heard_within_ms,
            });
        }
        if p.fingerprint.as_deref() != Some(self.members.fingerprint()) {
            return Err(SuccessorRefused::OtherMembers {
                theirs: p.fingerprint.clone(),
                ours: self.members.fingerprint().to_string(),
            });
        }
        if !self.peers.two_way(p, now) {
            return Err(SuccessorRefused::OneWay { heard_within_ms });
        }
        if !self.peers.viable(p, now) {
            return Err(SuccessorRefused::NoQuorum { heard_within_ms });
        }
        match p.candidacy {
            Some(Candidacy::Withdrawn) => Err(SuccessorRefused::Withdrawn),
            Some(Candidacy::Stopping) => Err(SuccessorRefused::Stopping),
            None => Err(SuccessorRefused::NoCandidacyYet { heard_within_ms }),
            // An operator's choice overrides the cooldown, and our resign ends a start-up guard.
            Some(Candidacy::Eligible | Candidacy::Booting | Candidacy::Cooling) => Ok(()),
        }
    }

    fn on_step_down(
        &mut self,
        now: Instant,
        successor: Option<String>,
        expected_term: Option<u64>,
    ) -> Result<Outcome, CommandError> {
        if !self.leading(now) {
            return Err(CommandError::NotLeader {
                term: self.term,
                leader: self.known_leader().map(str::to_string),
            });
        }
        if let Some(expected) = expected_term {
            if expected != self.term {
                return Err(CommandError::TermMismatch {
                    expected,
                    current: self.term,
                });
            }
        }
        if let Some(s) = &successor {
            self.check_successor(now, s)
                .map_err(|reason| CommandError::SuccessorIneligible {
                    successor: s.clone(),
                    reason,
                })?;
        }
        // Rule 16: nobody campaigns unless named, so a resign naming nobody would leave the
        // cluster leaderless; the best successor is named instead.
        let successor = match successor {
            None if self.maintenance => Some(
                self.best_successor(now)
                    .ok_or(CommandError::NoSuccessorInMaintenance)?,
            ),
            named => named,
        };
        let term = self.term;
        let reason = if successor.is_some() {
            Reason::Transfer
        } else {
            Reason::StepDown
        };
        self.resign(now, successor.clone(), reason);
        Ok(Outcome::SteppedDown { term, successor })
    }

    fn on_set_candidacy(
        &mut self,
        now: Instant,
        eligible: bool,
        priority: Option<u32>,
    ) -> Result<Outcome, CommandError> {
        let changed = self.eligible != eligible || priority.is_some_and(|p| p != self.priority);
        self.eligible = eligible;
        if let Some(p) = priority {
            self.priority = p;
        }
        if !eligible {
            if self.leading(now) {
                let successor = self.best_successor(now);
                self.resign(now, successor, Reason::StepDown);
            } else if matches!(self.state, State::PreCandidate(_) | State::Candidate(_)) {
                self.state = State::Follower { leader: None };
                self.reset_timer(now, self.timings.election_timeout);
            }
        }
        // Tell the others at once so their ranking follows.
        if changed && !matches!(self.state, State::Leader(_)) {
            self.send_presence(now);
        }
        Ok(Outcome::Accepted)
    }

    fn on_set_maintenance(&mut self, now: Instant, on: bool) {
        self.maintenance = on;
        // A round of our own that is under way would finish as a campaign: abandon it, as a
        // withdrawal does (rule 16).
        if matches!(self.state, State::PreCandidate(_) | State::Candidate(_))
            && self.held_by_maintenance(now)
        {
            self.state = State::Follower { leader: None };
            self.reset_timer(now, self.timings.election_timeout);
        }
    }

    /// Rule 17: health only orders members (see [`Standing`]); what changes at once is what
    /// the others hear of it, and whether this node counts itself as flapped: losing health is
    /// a flap (rule 12), and so is the recovery after it, so a node whose application fails
    /// again and again is not handed leadership again and again. Starting unhealthy
    /// ([`crate::Config::healthy`]) is neither.
    fn on_set_health(&mut self, now: Instant, healthy: bool) {
        if healthy == self.healthy {
            return;
        }
        self.healthy = healthy;
        if !healthy {
            self.lost_health = true;
        }
        if self.lost_health {
            self.flapped_at = Some(now);
        }
        // Tell the others at once so their ranking follows; a leader's next heartbeat does.
        if !matches!(self.state, State::Leader(_)) {
            self.send_presence(now);
        }
    }

    fn on_shutdown(&mut self, now: Instant) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        if self.leading(now) {
            let successor = self.best_successor(now);
            self.resign(now, successor, Reason::Shutdown);
        } else if matches!(self.state, State::PreCandidate(_) | State::Candidate(_)) {
            self.state = State::Follower { leader: None };
        }
    }

    /// Rule 17: an unhealthy leader hands over to the best healthy member that has been
    /// eligible, healthy and viable for `T` (past its own start-up guard, so it campaigns at
    /// once), once it has itself led for `T` (so a successor that cannot win is not handed
    /// leadership again at every election: [`Timer::HealthyHandover`]). Judged at every step
    /// from then on, a heartbeat at least. With no such member it goes on leading: unhealthy ranks last, it does not stop anyone leading.
    /// Maintenance holds leadership where it is, as for preemption (rule 16).
    fn maybe_yield_to_healthy(&mut self, now: Instant) {
        if self.healthy || self.maintenance || !self.leading(now) {
            return;
        }
        let t = self.timings.election_timeout;
        // `eligible_since` runs only while a member advertises itself eligible and healthy
        // (`Peers::heard`), so it alone says both, and since when.
        let best = self
            .peers
            .iter()
            .filter(|p| self.peers.viable(p, now))
            .filter(|p| p.eligible_since.is_some_and(|s| now >= s + t))
            .max_by(|a, b| {
                self.peers
                    .standing(a, now)
                    .cmp(&self.peers.standing(b, now))
            })
            .map(|p| p.id.clone());
        if let Some(successor) = best {
            self.resign(now, Some(successor), Reason::Unhealthy);
        }
    }

    /// Rule 12: hand over to a better-ranked member once it has been eligible and viable long
    /// enough. A member that flapped within the flap window does not outrank a steady leader,
    /// so a crash-looping node is not handed leadership again and again.
    fn maybe_preempt(&mut self, now: Instant) {
        // Rule 16: maintenance holds leadership where it is.
        if self.maintenance || !self.leading(now) {
            return;
        }
        // At least T, so the member is past its own start-up guard and can campaign at once; and
        // counted from our own election too ([`Timer::Preempt`]), so that a handover an operator
        // asked for holds for at least that long.
        let wait = self
            .timings
            .preempt_after
            .max(self.timings.election_timeout);
        let me = self.me(now);
        let best = self
            .peers
            .iter()
            .filter(|p| p.candidacy == Some(Candidacy::Eligible) && self.peers.viable(p, now))
            .filter(|p| self.peers.standing(p, now).outranks(&me))
            .filter(|p| p.eligible_since.is_some_and(|s| now >= s + wait))
            .max_by(|a, b| self.peers.rank(a).cmp(&self.peers.rank(b)))
            .map(|p| p.id.clone());
        if let Some(successor) = best {
            self.resign(now, Some(successor), Reason::Preempted);
        }
    }
}
