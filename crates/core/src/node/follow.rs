//! Following (rules 5, 8 and 10): the leader this node knows, the terms it adopts, and what a
//! leader's resign changes.

use std::time::Duration;

use tokio::time::Instant;

use crate::interface::{Action, Outcome, Reason, Transition};

use super::vote::{Favored, Guard};
use super::{KnownLeader, Node, Resigned, State};

impl Node {
    pub(super) fn known_leader(&self) -> Option<&str> {
        match &self.state {
            State::Follower { leader: Some(l) } => Some(&l.id),
            State::Leader(_) => Some(&self.id),
            _ => None,
        }
    }

    /// Records a change of the known leader for the shell (history, metrics, logs).
    pub(super) fn transition(
        &mut self,
        previous: Option<String>,
        leader: Option<String>,
        reason: Reason,
    ) {
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
    pub(super) fn set_leader(&mut self, now: Instant, leader: Option<String>, reason: Reason) {
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
    pub(super) fn stop_leading(&mut self, now: Instant, reason: Reason) {
        if matches!(self.state, State::Leader(_)) {
            self.set_leader(now, None, reason);
            self.reset_timer(now, self.timings.election_timeout);
        }
    }

    pub(super) fn adopt_term(&mut self, now: Instant, term: u64) {
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

    /// A heartbeat or victory declaration from `from` in our term; `same_members` when its
    /// member set is ours; `promise` what following it promises (rule 5).
    pub(super) fn follow(
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

    pub(super) fn on_resign(
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
}
