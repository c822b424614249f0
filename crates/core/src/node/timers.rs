//! The core's timers as one table (docs/protocol.md, "Timers"): [`Node::deadline`] says when
//! each is due and [`Node::on_timer`] what it does then. A deadline armed in one list and
//! forgotten in another would make a node oversleep with nothing to report it; with one table
//! it cannot.

use std::time::Duration;

use tokio::time::Instant;

use crate::interface::Reason;

use super::lead::PendingResign;
use super::{Node, State};

/// When a follower campaigns: `wait` after `base`, plus the stagger of rule 11 and jitter; or at
/// once (`at_once`) when a resign named it.
#[derive(Debug, Clone)]
pub(super) struct CampaignTimer {
    pub(super) base: Instant,
    pub(super) wait: Duration,
    pub(super) jitter: Duration,
    pub(super) at_once: Option<Instant>,
}

/// The core's timers, one per deadline (docs/protocol.md, "Timers"). [`Node::deadline`] is the
/// one place that says when each is due; [`Node::poll_timeout`] is the earliest deadline of those
/// that wake the node, and [`Node::on_time`] runs every due timer in the order of [`Timer::ALL`].
/// The order is part of the behaviour (a role change comes before what the new role does at the
/// same instant), and so part of every simulated run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
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
    pub(super) const ALL: [Timer; 13] = [
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
    pub(super) fn wakes(self) -> bool {
        !matches!(
            self,
            Timer::Favored | Timer::HealthyHandover | Timer::Preempt
        )
    }
}

/// `n` nanoseconds (at most `u64::MAX`: about 584 years, far beyond any instant the core
/// computes).
fn nanos(n: u128) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
}

impl Node {
    /// When `timer` is due, if it is armed: the one place that lists the core's deadlines.
    pub(super) fn deadline(&self, timer: Timer) -> Option<Instant> {
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
    pub(super) fn on_time(&mut self, now: Instant) {
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

    /// Rule 18, as the simulator checks it at every step: the last instant this node sent
    /// anything, when it sends next on its beat (a leader's heartbeat, any other node's
    /// presence), and the most that may lie between the two (`h` for a leader, `2h` for a
    /// follower of a leader, `h` otherwise). `None` before its first message.
    pub fn beat_check(&self) -> Option<(Instant, Instant, Duration)> {
        let last = self.last_sent?;
        let h = self.timings.heartbeat;
        let (timer, most) = match self.state {
            State::Leader(_) => (Timer::Heartbeat, h),
            State::Follower { leader: Some(_) } => (Timer::Presence, h * 2),
            _ => (Timer::Presence, h),
        };
        Some((last, self.deadline(timer)?, most))
    }

    /// Every node is heard at least every heartbeat interval: a follower through its acks, so
    /// it only announces itself when the heartbeats it answers are late. On the beat (rule 18)
    /// the presence comes at the last beat before `every` has passed, never later.
    fn next_presence(&self) -> Instant {
        let h = self.timings.heartbeat;
        let every = match self.state {
            State::Follower { leader: Some(_) } => h * 2,
            _ => h,
        };
        self.last_sent
            .map_or(self.timer.base, |s| self.next_beat(s + every - h, h))
    }

    /// The first instant after `after` on the node's beat of `period` (rule 18): at most
    /// `period` later, so that nothing on the beat comes later than it would without one.
    /// Without a beat, `after + period`.
    pub(crate) fn next_beat(&self, after: Instant, period: Duration) -> Instant {
        let Some(epoch) = self.beat else {
            return after + period;
        };
        let p = period.as_nanos().max(1);
        if after >= epoch {
            let k = (after - epoch).as_nanos() / p + 1;
            epoch + nanos(k * p)
        } else {
            // An epoch after `after` (a clock that was set back, in a test): the beats before it.
            let k = (epoch - after).as_nanos() / p;
            let at = epoch - nanos(k * p);
            if at > after {
                at
            } else {
                at + period
            }
        }
    }

    pub(super) fn draw_jitter(&mut self) -> Duration {
        // Smaller than the stagger so that jitter never reorders two ranks.
        let max = (self.timings.stagger / 5).max(self.timings.heartbeat / 10);
        Duration::from_nanos(self.rng.below(max.as_nanos() as u64))
    }

    pub(super) fn reset_timer(&mut self, now: Instant, wait: Duration) {
        self.timer = CampaignTimer {
            base: now,
            wait,
            jitter: self.draw_jitter(),
            at_once: None,
        };
    }

    /// After a failed round. Pre-votes change nothing anywhere, so retrying often is cheap.
    pub(super) fn retry_wait(&self) -> Duration {
        self.timings.heartbeat
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
}
