//! The shell's commands: step down (rule 10), candidacy, maintenance (rule 16), health
//! (rule 17) and shutdown.

use tokio::time::Instant;

use crate::interface::{CommandError, Outcome, Reason};

use super::{Node, State};

impl Node {
    pub(super) fn on_step_down(
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

    /// A consistent read (issue 39, item 4): a leader confirms it still leads by a round of
    /// acknowledgements that starts no earlier than now. It heartbeats at once, unless a
    /// heartbeat already left at this instant (reads that arrive together share one round);
    /// [`crate::View::leader_heard_at`] passes `now` once a quorum acked one. A heartbeat more
    /// changes no rule: it is what the leader sends every `h` anyway.
    pub(super) fn on_confirm_leadership(&mut self, now: Instant) -> Result<Outcome, CommandError> {
        if !self.leading(now) {
            return Err(CommandError::NotLeader {
                term: self.term,
                leader: self.known_leader().map(str::to_string),
            });
        }
        if !self.heartbeat_sent_at(now) {
            self.send_heartbeat(now);
        }
        Ok(Outcome::Accepted)
    }

    pub(super) fn on_set_candidacy(
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

    pub(super) fn on_set_maintenance(&mut self, now: Instant, on: bool) {
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
    pub(super) fn on_set_health(&mut self, now: Instant, healthy: bool) {
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
        // Tell the others at once so their ranking follows. A leader too: it may hand over in
        // this very turn (rule 17), and its resign carries no advert, so the others would go on
        // showing it healthy until its first ack to the new leader.
        self.send_presence(now);
    }

    pub(super) fn on_shutdown(&mut self, now: Instant) {
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
}
