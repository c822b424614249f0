//! Campaigning (rules 4 and 11): whether this node may stand now, how it ranks itself against
//! the members it hears, and its pre-vote and vote rounds up to the quorum that wins one.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::interface::{Outcome, Role};
use crate::message::{Body, Candidacy};
use crate::peers::{Peer, Standing};
use crate::rank::Rank;

use super::{Node, State};

/// A pre-vote or vote round this node runs for itself.
#[derive(Debug, Clone)]
pub(super) struct Round {
    term: u64,
    /// Members with our member set that granted, this node included, each with the lease its
    /// promise supports (rule 6; this node's own vote supports the whole `L`).
    pub(super) grants: BTreeMap<String, Duration>,
    /// When the request left: a lease built on these votes runs from here (rule 6).
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    /// The shell has run the step that started the round, so the term and the self-vote are
    /// on disk (it runs a step's actions before the next input).
    pub(super) durable: bool,
}

impl Node {
    pub(super) fn booting(&self, now: Instant) -> bool {
        self.boot.is_some_and(|b| now < b.until)
    }

    fn cooling(&self, now: Instant) -> bool {
        self.cooldown_until.is_some_and(|c| now < c)
    }

    pub(super) fn can_campaign(&self, now: Instant) -> bool {
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
    pub(super) fn may_start_campaign(&self, now: Instant) -> bool {
        self.can_campaign(now) && self.may_vote(now, &self.id.clone())
    }

    /// Rule 16: in maintenance only a member a leader's resign named campaigns, for as long as
    /// it is favored (`T`).
    pub(super) fn held_by_maintenance(&self, now: Instant) -> bool {
        self.maintenance
            && !self
                .voter
                .favored
                .as_ref()
                .is_some_and(|f| f.candidate == self.id && now < f.until)
    }

    /// Rule 1: a live member lists members more than one id away from ours.
    pub(super) fn config_conflict(&self, now: Instant) -> bool {
        self.peers.conflict_until().is_some_and(|u| now < u)
    }

    /// Candidacy as others should rank it (rule 11).
    pub(super) fn candidacy(&self, now: Instant) -> Candidacy {
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
    pub(super) fn resigned_in_this_term(&self, id: &str) -> bool {
        self.resigned
            .as_ref()
            .is_some_and(|r| r.leader == id && r.term == self.term)
    }

    /// This node's own standing, as the others see it as far as it can tell (rule 12).
    pub(super) fn me(&self, now: Instant) -> Standing<'_> {
        Standing {
            healthy: self.healthy,
            steady: self.flapped_at.is_none_or(|f| now >= f + self.flap_window),
            rank: Rank::new(self.priority, &self.id),
        }
    }

    /// Members whose candidacy makes a lower-ranked node wait its stagger (rule 11): they could
    /// win (two-way, hearing a quorum, same members; liveness is checked by the caller) and are
    /// eligible or about to be.
    pub(super) fn stagger_rival(&self, p: &Peer) -> bool {
        matches!(
            p.candidacy,
            Some(Candidacy::Eligible) | Some(Candidacy::Booting)
        ) && self.peers.could_win(p)
            && !self.resigned_in_this_term(&p.id)
    }

    pub(super) fn start_pre_vote(&mut self, now: Instant) {
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

    pub(super) fn on_grant(
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
}
