//! Leading (rules 6, 10, 12 and 17): the lease a quorum of acks renews, and handing leadership
//! over, whether the lease ran out, an operator asked, a better member came back or this node's
//! application failed.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::interface::{Action, Outcome, Reason, SuccessorRefused};
use crate::message::{Body, Candidacy, Message};

use super::vote::{Favored, Voter};
use super::{Node, Resigned, State};

/// How many resign messages an ex-leader repeats (one per heartbeat interval) so that one lost
/// message does not cost the successor a full election timeout (rule 10).
pub(super) const RESIGN_REPEATS: u8 = 3;

/// A heartbeat waiting for acknowledgements.
#[derive(Debug, Clone)]
pub(super) struct PendingHeartbeat {
    seq: u64,
    sent_at: Instant,
    /// Who acked it (this node included), each with the lease its promise supports (rule 6).
    acks: BTreeMap<String, Duration>,
}

/// The lease a quorum of promises supports: the best quorum's weakest promise (rule 6). `None`
/// until a quorum answered.
pub(super) fn quorum_lease(
    supports: &BTreeMap<String, Duration>,
    quorum: usize,
) -> Option<Duration> {
    let mut all: Vec<Duration> = supports.values().copied().collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    quorum.checked_sub(1).and_then(|i| all.get(i).copied())
}

#[derive(Debug, Clone)]
pub(super) struct Leadership {
    pub(super) since: Instant,
    /// The node leads only before this instant (rule 6).
    pub(super) lease_until: Instant,
    /// The send time of the newest heartbeat a quorum acknowledged (at first, the election's):
    /// this node was the only leader from then until that quorum was complete. A consistent
    /// read waits for it to pass the read's arrival (issue 39, item 4).
    pub(super) renewed_at: Instant,
    pub(super) next_heartbeat: Instant,
    /// Heartbeats younger than the lease, oldest first.
    pending: VecDeque<PendingHeartbeat>,
}

/// The resign an ex-leader repeats while nobody leads yet.
#[derive(Debug, Clone)]
pub(super) struct PendingResign {
    pub(super) message: Message,
    pub(super) repeats_left: u8,
}

impl Node {
    pub(super) fn send_heartbeat(&mut self, now: Instant) {
        let body = Body::Heartbeat {
            leader: self.id.clone(),
            timestamp: 0,
            lease_ms: self.timings.lease.as_millis() as u64,
            advert: self.advert(now),
        };
        let m = self.message(body);
        let quorum = self.members.quorum();
        let (lease, interval) = (self.timings.lease, self.timings.heartbeat);
        let mut next_heartbeat = None;
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
            let period = if at_risk { interval / 4 } else { interval };
            next_heartbeat = Some(period);
        }
        // On the node's beat (rule 18): at most `period` after this one.
        if let Some(period) = next_heartbeat {
            let at = self.next_beat(now, period);
            if let State::Leader(l) = &mut self.state {
                l.next_heartbeat = at;
            }
        }
        self.publish(now, m);
    }

    pub(super) fn become_leader(&mut self, now: Instant) {
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

    pub(super) fn on_ack(
        &mut self,
        now: Instant,
        from: &str,
        hb_seq: u64,
        support: Duration,
    ) -> Outcome {
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
            }
            // Confirmed even when the lease does not grow (a promise that shrank): every member
            // of the quorum acked a heartbeat of this term sent then, so none of them can have
            // voted for a later term before it acked, and each has promised not to since.
            l.renewed_at = l.renewed_at.max(p.sent_at);
        }
        Outcome::Accepted
    }

    /// Whether a heartbeat of this leadership left at `now`.
    pub(super) fn heartbeat_sent_at(&self, now: Instant) -> bool {
        matches!(&self.state, State::Leader(l) if l.pending.back().is_some_and(|p| p.sent_at == now))
    }

    pub(super) fn leading(&self, now: Instant) -> bool {
        matches!(&self.state, State::Leader(l) if now < l.lease_until)
    }

    /// Stops leading, then tells everyone, then cools down for `T` (rules 9 and 10).
    pub(super) fn resign(&mut self, now: Instant, successor: Option<String>, reason: Reason) {
        self.stop_leading(now, reason);
        self.actions.push_back(Action::Release { term: self.term });
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
    pub(super) fn best_successor(&self, now: Instant) -> Option<String> {
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
    pub(super) fn check_successor(&self, now: Instant, s: &str) -> Result<(), SuccessorRefused> {
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

    /// Rule 17: an unhealthy leader hands over to the best healthy member that has been
    /// eligible, healthy and viable for `T` (past its own start-up guard, so it campaigns at
    /// once), once it has itself led for `T` (so a successor that cannot win is not handed
    /// leadership again at every election: [`Timer::HealthyHandover`]). Judged at every step
    /// from then on, a heartbeat at least. With no such member it goes on leading: unhealthy ranks last, it does not stop anyone leading.
    /// Maintenance holds leadership where it is, as for preemption (rule 16).
    pub(super) fn maybe_yield_to_healthy(&mut self, now: Instant) {
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
    pub(super) fn maybe_preempt(&mut self, now: Instant) {
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
        // The cheapest tests first: a leader past its wait judges this at every step (the
        // timer does not wake it, so it is due from then on), and the leader of a settled
        // group outranks every member, so the viability of its members is seldom needed.
        let best = self
            .peers
            .iter()
            .filter(|p| p.candidacy == Some(Candidacy::Eligible))
            .filter(|p| p.eligible_since.is_some_and(|s| now >= s + wait))
            .filter(|p| self.peers.standing(p, now).outranks(&me))
            .filter(|p| self.peers.viable(p, now))
            // By standing, as every other choice of a successor: a steady member before a
            // flapped one that ranks higher, which it would soon have to preempt in turn.
            .max_by(|a, b| {
                self.peers
                    .standing(a, now)
                    .cmp(&self.peers.standing(b, now))
            })
            .map(|p| p.id.clone());
        if let Some(successor) = best {
            self.resign(now, Some(successor), Reason::Preempted);
        }
    }
}
