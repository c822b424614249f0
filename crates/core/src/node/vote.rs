//! Voting for others (rules 5, 10 and 11): the promise that holds a vote back, the successor a
//! resign favours, a pre-vote kept for a promise about to end, and the bounded rank veto.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::interface::Outcome;
use crate::message::{Body, Candidacy};
use crate::peers::Standing;
use crate::rank::Rank;

use super::send::floor_ms;
use super::{Node, State};

/// A promise this node keeps for a leader's lease (rule 5): no vote for anyone else until
/// `until`.
#[derive(Debug, Clone)]
pub(super) struct Guard {
    pub(super) holder: String,
    pub(super) until: Instant,
}

/// After a resign that named a successor, votes go only to it until `until` (rule 10).
#[derive(Debug, Clone)]
pub(super) struct Favored {
    pub(super) candidate: String,
    pub(super) until: Instant,
}

/// A pre-vote we would grant but for a guard that is about to expire. Answering it the moment
/// the guard expires saves the candidate a whole retry after a leader crash, when the voters
/// heard the last heartbeat a few milliseconds after the candidate did.
#[derive(Debug, Clone)]
pub(super) struct DeferredPreVote {
    candidate: String,
    priority: u32,
    term: u64,
    /// Dropped unanswered after `T`: the candidate's round is over by then.
    until: Instant,
}

/// What this node keeps as a voter, for the votes it gives or refuses others (rules 5, 10 and
/// 11); winning an election clears it.
#[derive(Debug, Clone, Default)]
pub(super) struct Voter {
    /// The promise of its latest ack or vote: no vote for anyone else until it ends (rule 5).
    pub(super) guard: Option<Guard>,
    /// The successor a resign named: votes go only to it for `T` (rule 10).
    pub(super) favored: Option<Favored>,
    /// A pre-vote kept for a promise about to end (rule 10).
    pub(super) deferred: Option<DeferredPreVote>,
    /// Rank vetoes this node has cast since it last knew a leader: rival id -> first veto.
    /// A rival that has not won within `T` of the first stops counting (the bounded veto,
    /// rule 11).
    pub(super) vetoes: BTreeMap<String, Instant>,
}

impl Node {
    /// Whether this node may vote for `candidate` now, whatever the term and rank: not starting
    /// up (rule 8), not leading, and no lease our silence protects but the candidate's (rule 5).
    pub(super) fn may_vote(&self, now: Instant, candidate: &str) -> bool {
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

    pub(super) fn on_pre_vote_request(
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
    pub(super) fn answer_deferred(&mut self, now: Instant) {
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

    pub(super) fn on_vote_request(
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
}
