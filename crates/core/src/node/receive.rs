//! The wire: which messages count at all (rule 1), what their term does to ours, and the
//! handler each one goes to.

use std::time::Duration;

use tokio::time::Instant;

use crate::interface::{Outcome, Role};
use crate::message::{Announced, Body, Message, Versions};

use super::Node;

impl Node {
    /// One message from the wire: the filters of rule 1, then a pre-vote (which changes no term)
    /// or, once its term was judged against ours (rule 2), a message of our term.
    pub(super) fn on_message(&mut self, now: Instant, m: Message) -> Outcome {
        if m.group != self.group || m.from == self.id || !Versions::OURS.speaks(m.v) {
            return Outcome::Ignored;
        }
        // Rule 1: a node outside our member set changes nothing, not even our term.
        if !self.members.contains(&m.from) {
            return Outcome::NotMember;
        }
        let same_members = m.members == self.members.fingerprint();
        if self.peers.heard(now, &m) {
            // A member may count a silence of ours as a flap: so do we (rule 12).
            self.flapped_at = Some(now);
        }
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
        if let Some(o) = self.on_pre_vote(now, &m) {
            return o;
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
        self.on_current_term(now, m, same_members)
    }

    /// A pre-vote request or grant, whatever its term: a pre-vote changes no term anywhere
    /// (rule 4). `None` for every other message.
    fn on_pre_vote(&mut self, now: Instant, m: &Message) -> Option<Outcome> {
        match &m.body {
            Body::Election {
                pre_vote: true,
                candidate,
                priority,
            } => Some(self.on_pre_vote_request(now, m.term, candidate, *priority)),
            Body::Vote {
                pre_vote: true,
                candidate,
                granted,
                ..
            } => {
                if *candidate != self.id || !*granted {
                    return Some(Outcome::Ignored);
                }
                let lease = self.timings.lease;
                Some(self.on_grant(now, m.term, &m.from, Role::PreCandidate, lease))
            }
            _ => None,
        }
    }

    /// A message of our term (adopted from it when it was newer), to the handler of its kind.
    fn on_current_term(&mut self, now: Instant, m: Message, same_members: bool) -> Outcome {
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
}
