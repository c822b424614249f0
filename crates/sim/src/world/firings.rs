//! Rule 19 in the simulation: each node's shell keeps a [`FiringBook`] as the real one does
//! (`src/runtime/firings.rs`): it takes a message's record before its core takes the message,
//! notes what acks to its own heartbeats carried, and sends its kept record on every message.
//! A leader claims the firing of the current period when its record is older and runs it once
//! a quorum holds the claim in its term ([`FiringRule::Quorum`]); `World::check_firings` holds
//! every step to the rule's invariant.

use super::*;
use pilot_election_core::firing::{Firing, FiringBook, FiringState};

/// When the modelled shell runs a firing it claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FiringRule {
    /// Once a quorum acknowledged the claim in the claimer's term (rule 19).
    #[default]
    Quorum,
    /// Broken, for the directed case that shows the check fires: at once, on the claim alone.
    AtClaim,
}

/// One node's shell state for rule 19.
#[derive(Debug, Default)]
pub(super) struct Shell {
    /// The record on its disk and what its leader's acks carried.
    pub(super) book: FiringBook,
    /// Its claim not run yet.
    pending: Option<Firing>,
}

impl Shell {
    /// After a restart: the record read back from disk; acks and a pending claim are gone.
    pub(super) fn restarted(&self) -> Shell {
        Shell {
            book: FiringBook::from_disk(self.book.record().cloned()),
            pending: None,
        }
    }
}

impl World {
    /// Firings every `period` of true time from now on (`None`: no schedule), run under `rule`.
    pub fn schedule_firings(&mut self, period: Option<Duration>, rule: FiringRule) {
        self.firing_period = period.map(|p| p.as_nanos() as u64);
        self.firing_rule = rule;
    }

    /// How many firings ran, each once (a second run is a violation).
    pub fn firings_run(&self) -> usize {
        self.firing_runs.len()
    }

    fn schedules(&self, i: usize) -> bool {
        self.firing_period.is_some() && self.slots[i].running_build == Build::Current
    }

    /// A member's message reaches node `i`'s shell, before its core.
    pub(super) fn firing_heard(&mut self, i: usize, m: &Message) {
        if !self.schedules(i) || self.index_of(&m.from).is_none() {
            return;
        }
        let me = self.slots[i].config.node_id.clone();
        let shell = &mut self.slots[i].firings;
        if let Some(write) = &m.firing {
            // Kept on disk before anything is sent after it: the model's disk is the slot.
            shell.book.take(write.clone(), true);
        }
        if let Body::Ack { leader, .. } = &m.body {
            if *leader == me {
                shell.book.acked(&m.from, m.term, m.firing.as_ref());
            }
        }
    }

    /// What node `i`'s shell stamps on a message it sends.
    pub(super) fn firing_sent(&self, i: usize) -> Option<Firing> {
        if !self.schedules(i) {
            return None;
        }
        self.slots[i].firings.book.sent().cloned()
    }

    /// After each step of node `i`: as leader, claim the current period's firing or run the
    /// claim a quorum now holds; then the invariant.
    pub(super) fn fire(&mut self, i: usize, view: &View) {
        let Some(period) = self.firing_period else {
            return;
        };
        if !self.schedules(i) {
            return;
        }
        let now = self.local(i, self.now);
        let (me, quorum) = {
            let c = &self.slots[i].config;
            (c.node_id.clone(), c.members.quorum())
        };
        if !view.is_leader_at(now) {
            self.slots[i].firings.pending = None;
            return;
        }
        let term = view.term;
        if let Some(claim) = self.slots[i].firings.pending.clone() {
            let book = &self.slots[i].firings.book;
            let members = self.slots[i].config.members.clone();
            let holders = book.held_by(&me, members.ids(), term, claim.at);
            if claim.term != term {
                self.slots[i].firings.pending = None;
            } else if holders.len() >= quorum {
                self.run_firing(i, &claim);
            }
            return;
        }
        let at = self.now / period + 1;
        if !self.slots[i].firings.book.may_claim(at) {
            return;
        }
        let claim = Firing {
            at,
            state: FiringState::Claimed,
            term,
            by: me,
            code: None,
            missed: 0,
        };
        self.slots[i].firings.book.take(claim.clone(), true);
        match self.firing_rule {
            FiringRule::Quorum => self.slots[i].firings.pending = Some(claim),
            FiringRule::AtClaim => self.run_firing(i, &claim),
        }
    }

    fn run_firing(&mut self, i: usize, claim: &Firing) {
        self.slots[i].firings.pending = None;
        if let Some((n, t)) = self.firing_runs.get(&claim.at) {
            let what = format!(
                "rule 19: firing {} ran twice: on {} in term {t}, then on {} in term {}",
                claim.at, self.slots[*n].config.node_id, self.slots[i].config.node_id, claim.term
            );
            self.checker.violate(self.now, what);
            return;
        }
        self.firing_runs.insert(claim.at, (i, claim.term));
        let done = Firing {
            state: FiringState::Ok,
            ..claim.clone()
        };
        self.slots[i].firings.book.take(done, true);
    }

    /// Rule 19's invariant, at every step: a node that leads in a term above that of a firing's
    /// run holds a record of that firing or a later one (so it can never claim it).
    pub(super) fn check_firings(&mut self, i: usize, view: &View) {
        if !self.schedules(i) || view.role != Role::Leader {
            return;
        }
        let known = self.slots[i].firings.book.record().map(|r| r.at);
        let behind = self
            .firing_runs
            .iter()
            .find(|(at, (_, t))| *t < view.term && known.is_none_or(|k| k < **at));
        if let Some((at, (n, t))) = behind {
            let what = format!(
                "rule 19: {} leads in term {} knowing firing {:?} at most, but firing {at} ran \
                 on {} in term {t}",
                self.slots[i].config.node_id, view.term, known, self.slots[*n].config.node_id
            );
            self.checker.violate(self.now, what);
        }
    }
}
