//! The election state machine of one node.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::message::{Body, Message, PROTOCOL_VERSION};
use super::rng::Rng;
use super::timings::Timings;

/// Static configuration of one node.
#[derive(Debug, Clone)]
pub struct Config {
    pub node_id: String,
    pub group: String,
    /// `N`: the number of voting members. Quorum is `N/2 + 1`.
    pub cluster_size: usize,
    pub priority: u32,
    /// Whether this node is a candidate at start.
    pub eligible: bool,
    pub timings: Timings,
}

/// What must survive a restart: without it a node could vote twice in one term.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Persistent {
    pub term: u64,
    pub voted_for: Option<String>,
}

/// A node's role in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Follower,
    /// Asking for pre-votes: nothing has changed yet.
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
    pub at: Instant,
}

/// What this node currently believes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub node_id: String,
    pub role: Role,
    pub term: u64,
    pub leader: Option<String>,
    pub voted_for: Option<String>,
    /// For a leader: the end of its lease. It is leader only before this instant.
    pub lease_until: Option<Instant>,
    /// Last time the leader was heard (for a leader: last lease renewal).
    pub leader_heard_at: Option<Instant>,
    /// When this node learned of the current leader.
    pub leader_since: Option<Instant>,
    pub priority: u32,
    /// Configured candidacy.
    pub eligible: bool,
    /// Whether it would campaign now (eligible and not starting up, cooling down or stopping).
    pub can_campaign: bool,
    pub shutting_down: bool,
}

impl View {
    /// Leadership as a client may rely on it: the role and an unexpired lease.
    pub fn is_leader_at(&self, now: Instant) -> bool {
        self.role == Role::Leader && self.lease_until.is_some_and(|l| now < l)
    }
}

/// Another member, as last heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub priority: u32,
    /// Advertised: whether it would campaign now.
    pub eligible: bool,
    pub last_seen: Instant,
    /// Since when it has been heard without a gap of `T` and advertised as eligible.
    pub eligible_since: Option<Instant>,
}

/// What the shell gives the core.
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
    /// Role, term, leader, vote or candidacy changed.
    StateChanged(View),
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
    /// The step-down command was carried out.
    SteppedDown {
        term: u64,
        successor: Option<String>,
    },
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

#[derive(Debug, Clone)]
struct Guard {
    /// The leader (or candidate we voted for) whose lease our silence protects.
    holder: String,
    until: Instant,
}

/// A pre-vote we would grant but for a guard that is about to expire. Answering it the moment
/// the guard expires saves the candidate a whole retry after a leader crash, when the voters
/// heard the last heartbeat a few milliseconds after the candidate did.
#[derive(Debug, Clone)]
struct Deferred {
    candidate: String,
    priority: u32,
    term: u64,
}

#[derive(Debug, Clone)]
struct Round {
    term: u64,
    grants: BTreeSet<String>,
    started: Instant,
    deadline: Instant,
}

#[derive(Debug, Clone)]
struct PendingHeartbeat {
    seq: u64,
    sent_at: Instant,
    acks: BTreeSet<String>,
}

#[derive(Debug, Clone)]
struct Leadership {
    since: Instant,
    lease_until: Instant,
    renewed_at: Instant,
    next_heartbeat: Instant,
    pending: VecDeque<PendingHeartbeat>,
}

/// Rank: `(priority, id)` compared lexicographically, greater wins.
fn outranks(a: (u32, &str), b: (u32, &str)) -> bool {
    a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)) == Ordering::Greater
}

/// The top-ranked of some members, by the same rank as [`outranks`].
fn top_ranked<'a>(members: impl Iterator<Item = &'a Member>) -> Option<&'a Member> {
    members.max_by(|a, b| a.priority.cmp(&b.priority).then_with(|| a.id.cmp(&b.id)))
}

/// How many resign messages an ex-leader repeats (one per heartbeat interval) so that one lost
/// message does not cost the successor a full election timeout.
const RESIGN_REPEATS: u8 = 3;

/// The election state machine of one node.
#[derive(Debug)]
pub struct Node {
    id: String,
    group: String,
    quorum: usize,
    cluster_size: usize,
    t: Timings,
    priority: u32,
    eligible: bool,
    rng: Rng,

    term: u64,
    voted_for: Option<String>,

    role: Role,
    leader: Option<String>,
    leader_heard_at: Option<Instant>,
    leader_since: Option<Instant>,
    guard: Option<Guard>,
    resigned: Option<(String, u64)>,
    favored: Option<(String, Instant)>,
    members: BTreeMap<String, Member>,

    boot_until: Instant,
    cooldown_until: Option<Instant>,
    shutting_down: bool,

    timer_base: Instant,
    timer_wait: Duration,
    jitter: Duration,
    campaign_at: Option<Instant>,

    round: Option<Round>,
    leadership: Option<Leadership>,
    deferred: Option<Deferred>,

    last_sent: Option<Instant>,
    seq: u64,
    pending_resign: Option<(Message, u8)>,

    actions: VecDeque<Action>,
    last_view: View,
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
        let cluster_size = config.cluster_size.max(1);
        let view = View {
            node_id: config.node_id.clone(),
            role: Role::Follower,
            term: persisted.term,
            leader: None,
            voted_for: persisted.voted_for.clone(),
            lease_until: None,
            leader_heard_at: None,
            leader_since: None,
            priority: config.priority,
            eligible: config.eligible,
            can_campaign: false,
            shutting_down: false,
        };
        let mut node = Node {
            id: config.node_id,
            group: config.group,
            quorum: cluster_size / 2 + 1,
            cluster_size,
            t,
            priority: config.priority,
            eligible: config.eligible,
            rng: Rng::new(seed),
            term: persisted.term,
            voted_for: persisted.voted_for,
            role: Role::Follower,
            leader: None,
            leader_heard_at: None,
            leader_since: None,
            guard: None,
            resigned: None,
            favored: None,
            members: BTreeMap::new(),
            // Rule 7: we may have acked a leader just before a crash; that ack may still hold
            // its lease, so for T we neither vote nor campaign.
            boot_until: now + t.election_timeout,
            cooldown_until: None,
            shutting_down: false,
            timer_base: now,
            timer_wait: t.election_timeout,
            jitter: Duration::ZERO,
            campaign_at: None,
            round: None,
            leadership: None,
            deferred: None,
            last_sent: None,
            seq: seq_start,
            pending_resign: None,
            actions: VecDeque::new(),
            last_view: view,
        };
        node.jitter = node.draw_jitter();
        node.last_view = node.view(now);
        node
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn term(&self) -> u64 {
        self.term
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn quorum(&self) -> usize {
        self.quorum
    }

    pub fn cluster_size(&self) -> usize {
        self.cluster_size
    }

    pub fn timings(&self) -> &Timings {
        &self.t
    }

    /// The next sequence number this node would use.
    pub fn next_seq(&self) -> u64 {
        self.seq
    }

    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// Whether the member was heard within `T`.
    pub fn is_live(&self, m: &Member, now: Instant) -> bool {
        now < m.last_seen + self.t.election_timeout
    }

    pub fn persistent(&self) -> Persistent {
        Persistent {
            term: self.term,
            voted_for: self.voted_for.clone(),
        }
    }

    pub fn view(&self, now: Instant) -> View {
        View {
            node_id: self.id.clone(),
            role: self.role,
            term: self.term,
            leader: self.leader.clone(),
            voted_for: self.voted_for.clone(),
            lease_until: self.leadership.as_ref().map(|l| l.lease_until),
            leader_heard_at: match &self.leadership {
                Some(l) => Some(l.renewed_at),
                None => self.leader_heard_at,
            },
            leader_since: self.leader_since,
            priority: self.priority,
            eligible: self.eligible,
            can_campaign: self.can_campaign(now),
            shutting_down: self.shutting_down,
        }
    }

    /// The next action for the shell, in the order they must be executed.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When the shell must call `handle(now, Input::Tick)` next at the latest.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut at = |i: Instant| next = Some(next.map_or(i, |n| n.min(i)));
        at(self.next_presence());
        if let Some(l) = &self.leadership {
            at(l.next_heartbeat);
            at(l.lease_until);
        }
        if let Some(r) = &self.round {
            at(r.deadline);
        }
        if let (Some(_), Some(g)) = (&self.deferred, &self.guard) {
            at(g.until);
        }
        if let Some(heard) = self.leader_heard_at {
            if self.leader.is_some() && self.role != Role::Leader {
                at(heard + self.t.election_timeout);
            }
        }
        if self.role == Role::Follower {
            if let Some(d) = self.election_deadline() {
                at(d);
            }
        }
        next
    }

    /// Feeds one input. Commands may be refused; messages never are (they are just counted).
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<Outcome, CommandError> {
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
            Input::Shutdown => {
                self.on_shutdown(now);
                Ok(Outcome::Accepted)
            }
        };
        self.on_time(now);
        self.emit_view(now);
        result
    }

    // ---- timers -------------------------------------------------------------------------

    fn on_time(&mut self, now: Instant) {
        if let Some(l) = &self.leadership {
            if now >= l.lease_until {
                // CheckQuorum: no quorum acked within the lease; we may no longer lead.
                self.stop_leading(now, Reason::LeaseExpired);
            }
        }
        if self.role != Role::Leader && self.leader.is_some() {
            if let Some(heard) = self.leader_heard_at {
                if now >= heard + self.t.election_timeout {
                    self.set_leader(now, None, Reason::LeaderTimeout);
                }
            }
        }
        if let Some(r) = &self.round {
            if now >= r.deadline {
                self.round = None;
                self.role = Role::Follower;
                self.reset_timer(now, self.retry_wait());
            }
        }
        if let Some((_, until)) = &self.favored {
            if now >= *until {
                self.favored = None;
            }
        }
        if self.cooldown_until.is_some_and(|c| now >= c) {
            self.cooldown_until = None;
        }
        if self.role == Role::Leader {
            self.maybe_preempt(now);
        }
        if let Some(l) = &self.leadership {
            if now >= l.next_heartbeat {
                self.send_heartbeat(now);
            }
        }
        if self.deferred.is_some() {
            self.answer_deferred(now);
        }
        // Our own vote counts like any other: never while it may be holding up someone's lease.
        let own_vote_free = self.may_vote(now, &self.id);
        if self.role == Role::Follower && self.can_campaign(now) && own_vote_free {
            if let Some(deadline) = self.election_deadline() {
                if now >= deadline {
                    self.start_pre_vote(now);
                }
            }
        }
        if self.role != Role::Leader && now >= self.next_presence() {
            if let Some((msg, left)) = self.pending_resign.take() {
                if left > 0 && self.leader.is_none() && msg.term == self.term {
                    let mut again = msg.clone();
                    again.seq = self.take_seq();
                    self.publish(now, again);
                    self.pending_resign = Some((msg, left - 1));
                    return;
                }
            }
            self.send_presence(now);
        }
    }

    /// Every node is heard at least every heartbeat interval: a follower through its acks, so
    /// it only announces itself when the heartbeats it answers are late.
    fn next_presence(&self) -> Instant {
        let every = if self.leader.is_some() && self.role != Role::Leader {
            self.t.heartbeat * 2
        } else {
            self.t.heartbeat
        };
        self.last_sent.map_or(self.timer_base, |s| s + every)
    }

    fn draw_jitter(&mut self) -> Duration {
        // Smaller than the stagger so that jitter never reorders two ranks.
        let max = (self.t.stagger / 5).max(self.t.heartbeat / 10);
        Duration::from_nanos(self.rng.below(max.as_nanos() as u64))
    }

    fn reset_timer(&mut self, now: Instant, wait: Duration) {
        self.timer_base = now;
        self.timer_wait = wait;
        self.campaign_at = None;
        self.jitter = self.draw_jitter();
    }

    /// After a failed round. Pre-votes change nothing anywhere, so retrying often is cheap.
    fn retry_wait(&self) -> Duration {
        self.t.heartbeat
    }

    fn counts_as_rival(&self, m: &Member, now: Instant) -> bool {
        m.eligible && self.is_live(m, now) && !self.resigned_in_this_term(&m.id)
    }

    /// A leader that resigned in our current term stays out of the ranking until a new term.
    fn resigned_in_this_term(&self, id: &str) -> bool {
        self.resigned
            .as_ref()
            .is_some_and(|(r, t)| r == id && *t == self.term)
    }

    /// When a follower campaigns, if nothing else happens first: `T` (or a shorter wait after a
    /// resign or a failed round) plus `S` per live eligible member that outranks it, plus jitter.
    /// Members drop out of that count as they go silent, so the deadline is the first instant at
    /// which the wait covers the members still live then. Exact, so the shell can sleep until it.
    fn election_deadline(&self) -> Option<Instant> {
        if self.leader.is_some() || !self.eligible || self.shutting_down {
            return None;
        }
        let floor = self
            .boot_until
            .max(self.cooldown_until.unwrap_or(self.boot_until));
        if let Some(at) = self.campaign_at {
            return Some(at.max(floor));
        }
        let base = self.timer_base + self.timer_wait + self.jitter;
        let me = (self.priority, self.id.as_str());
        let mut expiries: Vec<Instant> = self
            .members
            .values()
            .filter(|m| m.eligible && !self.resigned_in_this_term(&m.id))
            .filter(|m| outranks((m.priority, &m.id), me))
            .map(|m| m.last_seen + self.t.election_timeout)
            .filter(|e| *e > base)
            .collect();
        expiries.sort();
        let n = expiries.len();
        let mut lo = base;
        for i in 0..=n {
            let candidate = lo.max(base + self.t.stagger * (n - i) as u32);
            match expiries.get(i) {
                Some(hi) if candidate >= *hi => lo = *hi,
                _ => return Some(candidate.max(floor)),
            }
        }
        Some(lo.max(floor))
    }

    fn can_campaign(&self, now: Instant) -> bool {
        self.eligible
            && !self.shutting_down
            && now >= self.boot_until
            && self.cooldown_until.is_none_or(|c| now >= c)
    }

    // ---- sending ----------------------------------------------------------------------

    fn take_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    fn message(&mut self, body: Body) -> Message {
        Message {
            v: PROTOCOL_VERSION,
            group: self.group.clone(),
            from: self.id.clone(),
            term: self.term,
            seq: self.take_seq(),
            ts: 0,
            body,
            kid: None,
            sig: None,
        }
    }

    fn message_for_term(&mut self, term: u64, body: Body) -> Message {
        let mut m = self.message(body);
        m.term = term;
        m
    }

    fn publish(&mut self, now: Instant, m: Message) {
        self.last_sent = Some(now);
        self.actions.push_back(Action::Publish(m));
    }

    fn persist(&mut self) {
        self.actions.push_back(Action::Persist(self.persistent()));
    }

    /// Candidacy as others should rank it: a node that is only starting up still counts (it
    /// will campaign soon), one cooling down after a resign or stopping does not.
    fn advertised_eligible(&self, now: Instant) -> bool {
        self.eligible && !self.shutting_down && self.cooldown_until.is_none_or(|c| now >= c)
    }

    fn send_presence(&mut self, now: Instant) {
        let body = Body::Presence {
            priority: self.priority,
            eligible: self.advertised_eligible(now),
        };
        let m = self.message(body);
        self.publish(now, m);
    }

    fn send_heartbeat(&mut self, now: Instant) {
        let body = Body::Heartbeat {
            leader: self.id.clone(),
            timestamp: 0,
            lease_ms: self.t.lease.as_millis() as u64,
            priority: self.priority,
            eligible: self.advertised_eligible(now),
        };
        let m = self.message(body);
        let quorum = self.quorum;
        let lease = self.t.lease;
        let interval = self.t.heartbeat;
        if let Some(l) = &mut self.leadership {
            let mut acks = BTreeSet::new();
            acks.insert(self.id.clone());
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

    // ---- state changes ----------------------------------------------------------------

    fn emit_view(&mut self, now: Instant) {
        let v = self.view(now);
        let changed = v.role != self.last_view.role
            || v.term != self.last_view.term
            || v.leader != self.last_view.leader
            || v.voted_for != self.last_view.voted_for
            || v.priority != self.last_view.priority
            || v.eligible != self.last_view.eligible
            || v.can_campaign != self.last_view.can_campaign
            || v.shutting_down != self.last_view.shutting_down;
        self.last_view = v.clone();
        if changed {
            self.actions.push_back(Action::StateChanged(v));
        }
    }

    fn set_leader(&mut self, now: Instant, leader: Option<String>, reason: Reason) {
        if self.leader == leader {
            return;
        }
        let previous = self.leader.take();
        self.leader = leader.clone();
        self.leader_since = leader.as_ref().map(|_| now);
        if leader.is_none() {
            self.leader_heard_at = None;
        }
        self.actions.push_back(Action::Transition(Transition {
            term: self.term,
            leader,
            previous,
            reason,
            at: now,
        }));
    }

    /// Leaves the leader role *before* anything announces it.
    fn stop_leading(&mut self, now: Instant, reason: Reason) {
        if self.leadership.take().is_some() {
            self.role = Role::Follower;
            self.set_leader(now, None, reason);
            self.reset_timer(now, self.t.election_timeout);
        }
    }

    fn adopt_term(&mut self, now: Instant, term: u64) {
        debug_assert!(term > self.term);
        self.term = term;
        self.voted_for = None;
        self.round = None;
        if self.leadership.take().is_some() {
            self.reset_timer(now, self.t.election_timeout);
        }
        self.role = Role::Follower;
        if self.leader.is_some() {
            self.set_leader(now, None, Reason::HigherTerm);
        }
        self.persist();
    }

    // ---- campaigning ------------------------------------------------------------------

    fn start_pre_vote(&mut self, now: Instant) {
        let term = self.term + 1;
        let mut grants = BTreeSet::new();
        grants.insert(self.id.clone());
        self.role = Role::PreCandidate;
        self.round = Some(Round {
            term,
            grants,
            started: now,
            deadline: now + self.t.heartbeat * 2,
        });
        self.campaign_at = None;
        if self.quorum <= 1 {
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
        if self.leader.is_some() {
            self.set_leader(now, None, Reason::HigherTerm);
        }
        self.persist();
        let mut grants = BTreeSet::new();
        grants.insert(self.id.clone());
        self.role = Role::Candidate;
        self.round = Some(Round {
            term: self.term,
            grants,
            started: now,
            deadline: now + self.t.election_timeout / 2,
        });
        if self.quorum <= 1 {
            self.become_leader(now);
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
        let Some(round) = self.round.take() else {
            return;
        };
        // The lease runs from when the election left this node; every vote came after that.
        let lease_until = round.started + self.t.lease;
        if now >= lease_until {
            self.role = Role::Follower;
            self.reset_timer(now, self.retry_wait());
            return;
        }
        self.role = Role::Leader;
        self.resigned = None;
        self.favored = None;
        self.guard = None;
        self.pending_resign = None;
        self.leadership = Some(Leadership {
            since: now,
            lease_until,
            renewed_at: round.started,
            next_heartbeat: now,
            pending: VecDeque::new(),
        });
        self.set_leader(now, Some(self.id.clone()), Reason::Elected);
        let body = Body::Leader {
            leader: self.id.clone(),
            elected_at: 0,
        };
        let m = self.message(body);
        self.publish(now, m);
        self.send_heartbeat(now);
    }

    // ---- receiving --------------------------------------------------------------------

    fn note_member(&mut self, now: Instant, m: &Message) {
        let advertised = match &m.body {
            Body::Heartbeat {
                priority, eligible, ..
            }
            | Body::Ack {
                priority, eligible, ..
            }
            | Body::Presence { priority, eligible } => Some((*priority, *eligible)),
            Body::Election { priority, .. } => Some((*priority, true)),
            _ => None,
        };
        let gap = self.t.election_timeout;
        let entry = self
            .members
            .entry(m.from.clone())
            .or_insert_with(|| Member {
                id: m.from.clone(),
                priority: advertised.map_or(0, |a| a.0),
                eligible: false,
                last_seen: now,
                eligible_since: None,
            });
        if now >= entry.last_seen + gap {
            entry.eligible_since = None;
        }
        entry.last_seen = now;
        if let Some((priority, eligible)) = advertised {
            entry.priority = priority;
            entry.eligible = eligible;
        }
        if entry.eligible {
            entry.eligible_since.get_or_insert(now);
        } else {
            entry.eligible_since = None;
        }
    }

    fn on_message(&mut self, now: Instant, m: Message) -> Outcome {
        if m.group != self.group || m.from == self.id || m.v != PROTOCOL_VERSION {
            return Outcome::Ignored;
        }
        self.note_member(now, &m);
        match &m.body {
            Body::Election {
                pre_vote: true,
                candidate,
                priority,
            } => {
                let (candidate, priority) = (candidate.clone(), *priority);
                return self.on_pre_vote_request(now, &m, &candidate, priority);
            }
            Body::Vote {
                pre_vote: true,
                candidate,
                granted,
            } => {
                if *candidate != self.id || !*granted {
                    return Outcome::Ignored;
                }
                return self.on_grant(now, m.term, &m.from, Role::PreCandidate);
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
        match m.body {
            Body::Heartbeat { .. } => {
                let o = self.follow(now, &m.from);
                if o == Outcome::Accepted {
                    let body = Body::Ack {
                        leader: m.from.clone(),
                        hb_seq: m.seq,
                        priority: self.priority,
                        eligible: self.advertised_eligible(now),
                    };
                    let ack = self.message(body);
                    self.publish(now, ack);
                }
                o
            }
            Body::Leader { .. } => self.follow(now, &m.from),
            Body::Ack { leader, hb_seq, .. } => {
                if leader != self.id {
                    return Outcome::Ignored;
                }
                self.on_ack(&m.from, hb_seq)
            }
            Body::Presence { .. } => Outcome::Accepted,
            Body::Election {
                candidate,
                priority,
                ..
            } => self.on_vote_request(now, &candidate, priority),
            Body::Vote {
                candidate, granted, ..
            } => {
                if candidate != self.id || !granted {
                    return Outcome::Ignored;
                }
                self.on_grant(now, m.term, &m.from, Role::Candidate)
            }
            Body::Resign { successor, .. } => self.on_resign(now, &m.from, successor),
        }
    }

    /// A heartbeat or victory declaration from `from` in our term.
    fn follow(&mut self, now: Instant, from: &str) -> Outcome {
        if self.role == Role::Leader {
            // Two leaders in one term cannot happen; never yield to an impostor of our term.
            return Outcome::Ignored;
        }
        if self.resigned_in_this_term(from) {
            // A heartbeat that was overtaken by its sender's resignation.
            return Outcome::Stale;
        }
        if let Some(l) = &self.leader {
            if l != from {
                return Outcome::Ignored;
            }
        }
        self.round = None;
        self.deferred = None;
        self.role = Role::Follower;
        self.leader_heard_at = Some(now);
        self.set_leader(now, Some(from.to_string()), Reason::Elected);
        self.guard = Some(Guard {
            holder: from.to_string(),
            until: now + self.t.election_timeout,
        });
        self.favored = None;
        self.reset_timer(now, self.t.election_timeout);
        Outcome::Accepted
    }

    fn on_ack(&mut self, from: &str, hb_seq: u64) -> Outcome {
        let quorum = self.quorum;
        let lease = self.t.lease;
        let Some(l) = &mut self.leadership else {
            return Outcome::Stale;
        };
        let Some(p) = l.pending.iter_mut().find(|p| p.seq == hb_seq) else {
            return Outcome::Stale;
        };
        p.acks.insert(from.to_string());
        if p.acks.len() >= quorum {
            let until = p.sent_at + lease;
            if until > l.lease_until {
                l.lease_until = until;
                l.renewed_at = p.sent_at;
            }
        }
        Outcome::Accepted
    }

    fn on_grant(&mut self, now: Instant, term: u64, from: &str, stage: Role) -> Outcome {
        if self.role != stage {
            return Outcome::Stale;
        }
        let quorum = self.quorum;
        let Some(r) = &mut self.round else {
            return Outcome::Stale;
        };
        if r.term != term {
            return Outcome::Stale;
        }
        r.grants.insert(from.to_string());
        if r.grants.len() >= quorum {
            match stage {
                Role::PreCandidate => self.start_election(now),
                _ => self.become_leader(now),
            }
        }
        Outcome::Accepted
    }

    /// Whether this node may vote for `candidate` now, whatever the term and rank: no live
    /// leader whose lease our silence protects, not starting up, not leading ourselves.
    fn may_vote(&self, now: Instant, candidate: &str) -> bool {
        if now < self.boot_until {
            return false;
        }
        if self.leadership.is_some() {
            return false;
        }
        match &self.guard {
            Some(g) if now < g.until => g.holder == candidate,
            _ => true,
        }
    }

    /// The rank rule shared by pre-votes and votes.
    fn acceptable_candidate(&self, now: Instant, candidate: &str, priority: u32) -> bool {
        if let Some((favored, until)) = &self.favored {
            if now < *until {
                return favored == candidate;
            }
        }
        if self.can_campaign(now) && outranks((self.priority, &self.id), (priority, candidate)) {
            return false;
        }
        !self.members.values().any(|m| {
            m.id != candidate
                && self.counts_as_rival(m, now)
                && outranks((m.priority, &m.id), (priority, candidate))
        })
    }

    fn on_pre_vote_request(
        &mut self,
        now: Instant,
        m: &Message,
        candidate: &str,
        priority: u32,
    ) -> Outcome {
        if m.term <= self.term {
            return Outcome::Stale;
        }
        if self.may_vote(now, candidate) && self.acceptable_candidate(now, candidate, priority) {
            self.grant_pre_vote(now, candidate, m.term);
            return Outcome::Accepted;
        }
        // The silent leader still counts as live until the same moment its guard expires, so
        // judge the candidate as of then.
        if let Some(until) = self.guard.as_ref().map(|g| g.until) {
            let defer = self.leadership.is_none()
                && until >= self.boot_until
                && until <= now + self.t.heartbeat
                && self.acceptable_candidate(until, candidate, priority);
            if defer {
                self.deferred = Some(Deferred {
                    candidate: candidate.to_string(),
                    priority,
                    term: m.term,
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
        };
        let reply = self.message_for_term(term, body);
        self.publish(now, reply);
    }

    fn answer_deferred(&mut self, now: Instant) {
        if self.guard.as_ref().is_some_and(|g| now < g.until) {
            return;
        }
        if let Some(d) = self.deferred.take() {
            if d.term > self.term
                && self.may_vote(now, &d.candidate)
                && self.acceptable_candidate(now, &d.candidate, d.priority)
            {
                self.grant_pre_vote(now, &d.candidate, d.term);
            }
        }
    }

    fn on_vote_request(&mut self, now: Instant, candidate: &str, priority: u32) -> Outcome {
        // Terms are equal here (a higher one was adopted by the caller).
        let already = self.voted_for.as_deref();
        let granted = match already {
            Some(v) => v == candidate,
            None => {
                matches!(self.role, Role::Follower | Role::PreCandidate)
                    && self.may_vote(now, candidate)
                    && self.acceptable_candidate(now, candidate, priority)
            }
        };
        if !granted {
            return Outcome::Ignored;
        }
        if self.role == Role::PreCandidate {
            self.round = None;
            self.role = Role::Follower;
        }
        if already.is_none() {
            self.voted_for = Some(candidate.to_string());
            self.persist();
        }
        // Until T passes, the lease the candidate may build on our vote is protected.
        self.guard = Some(Guard {
            holder: candidate.to_string(),
            until: now + self.t.election_timeout,
        });
        self.reset_timer(now, self.t.election_timeout);
        let body = Body::Vote {
            candidate: candidate.to_string(),
            granted: true,
            pre_vote: false,
        };
        let reply = self.message(body);
        self.publish(now, reply);
        Outcome::Accepted
    }

    fn on_resign(&mut self, now: Instant, from: &str, successor: Option<String>) -> Outcome {
        if self.resigned_in_this_term(from) {
            return Outcome::Stale;
        }
        if self.role == Role::Leader {
            return Outcome::Ignored;
        }
        self.resigned = Some((from.to_string(), self.term));
        if self.guard.as_ref().is_some_and(|g| g.holder == from) {
            // The leader stopped leading before it said so: its lease no longer needs us.
            self.guard = None;
        }
        let reason = if successor.is_some() {
            Reason::Transfer
        } else {
            Reason::StepDown
        };
        if self.leader.as_deref() == Some(from) {
            self.set_leader(now, None, reason);
        }
        if let Some(m) = self.members.get_mut(from) {
            m.eligible = false;
            m.eligible_since = None;
        }
        match successor {
            Some(s) if s == self.id => {
                self.favored = Some((s, now + self.t.election_timeout));
                self.reset_timer(now, Duration::ZERO);
                self.campaign_at = Some(now);
            }
            Some(s) => {
                self.favored = Some((s, now + self.t.election_timeout));
                self.reset_timer(now, self.t.election_timeout);
            }
            None => {
                self.favored = None;
                self.reset_timer(now, Duration::ZERO);
            }
        }
        Outcome::Accepted
    }

    // ---- commands ---------------------------------------------------------------------

    fn leading(&self, now: Instant) -> bool {
        self.role == Role::Leader
            && self
                .leadership
                .as_ref()
                .is_some_and(|l| now < l.lease_until)
    }

    /// Stops leading, then tells everyone, then cools down for `T`.
    fn resign(&mut self, now: Instant, successor: Option<String>, reason: Reason) {
        self.stop_leading(now, reason);
        self.resigned = Some((self.id.clone(), self.term));
        self.cooldown_until = Some(now + self.t.election_timeout);
        self.favored = successor
            .clone()
            .map(|s| (s, now + self.t.election_timeout));
        let body = Body::Resign {
            leader: self.id.clone(),
            successor,
        };
        let m = self.message(body);
        self.pending_resign = Some((m.clone(), RESIGN_REPEATS));
        self.publish(now, m);
    }

    /// The best live eligible member to hand over to, if any.
    fn best_successor(&self, now: Instant) -> Option<String> {
        top_ranked(
            self.members
                .values()
                .filter(|m| m.eligible && self.is_live(m, now)),
        )
        .map(|m| m.id.clone())
    }

    fn check_successor(&self, now: Instant, s: &str) -> Result<(), CommandError> {
        let refuse = |reason: String| {
            Err(CommandError::SuccessorIneligible {
                successor: s.to_string(),
                reason,
            })
        };
        if s == self.id {
            return refuse("it is this node, which is stepping down".into());
        }
        let Some(m) = self.members.get(s) else {
            return refuse("no such member has been heard from".into());
        };
        if !self.is_live(m, now) {
            let ms = now.duration_since(m.last_seen).as_millis();
            return refuse(format!("not heard from for {ms} ms"));
        }
        if !m.eligible {
            return refuse("it is not a candidate (withdrawn, starting up or cooling down)".into());
        }
        Ok(())
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
                leader: self.leader.clone(),
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
            self.check_successor(now, s)?;
        }
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
        self.eligible = eligible;
        if let Some(p) = priority {
            self.priority = p;
        }
        if !eligible {
            if self.leading(now) {
                let successor = self.best_successor(now);
                self.resign(now, successor, Reason::StepDown);
            } else if matches!(self.role, Role::PreCandidate | Role::Candidate) {
                self.round = None;
                self.role = Role::Follower;
                self.reset_timer(now, self.t.election_timeout);
            }
        }
        // Tell the others at once so their ranking follows.
        if self.role != Role::Leader {
            self.send_presence(now);
        }
        Ok(Outcome::Accepted)
    }

    fn on_shutdown(&mut self, now: Instant) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        if self.leading(now) {
            let successor = self.best_successor(now);
            self.resign(now, successor, Reason::Shutdown);
        } else {
            self.round = None;
            if self.role != Role::Follower {
                self.stop_leading(now, Reason::Shutdown);
                self.role = Role::Follower;
            }
        }
    }

    fn maybe_preempt(&mut self, now: Instant) {
        if self.t.preempt_after.is_zero() || !self.leading(now) {
            return;
        }
        let me = (self.priority, self.id.as_str());
        // At least T, so the member is past its own start-up guard and can campaign at once; and
        // counted from our own election too, so that a handover an operator asked for holds for
        // at least that long.
        let wait = self.t.preempt_after.max(self.t.election_timeout);
        let since = self.leadership.as_ref().map_or(now, |l| l.since);
        if now < since + wait {
            return;
        }
        let best = top_ranked(
            self.members
                .values()
                .filter(|m| m.eligible && self.is_live(m, now))
                .filter(|m| outranks((m.priority, &m.id), me))
                .filter(|m| m.eligible_since.is_some_and(|s| now >= s + wait)),
        )
        .map(|m| m.id.clone());
        if let Some(successor) = best {
            self.resign(now, Some(successor), Reason::Preempted);
        }
    }
}
