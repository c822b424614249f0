//! Everything that leaves: sequence numbers, the wire version every member reads (rule 15),
//! the advert each message carries, and the promises recorded on disk before they leave
//! (rule 8).

use std::time::Duration;

use tokio::time::Instant;

use crate::interface::Action;
use crate::message::{Advert, Announced, Body, Message, Versions};

use super::Node;

/// A promise in whole milliseconds, rounded down: the leader counts no more than was promised.
pub(super) fn floor_ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Node {
    pub(super) fn take_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    pub(super) fn message_for_term(&mut self, term: u64, body: Body) -> Message {
        Message {
            v: self.wire_version(),
            term,
            seq: self.take_seq(),
            members: self.members.fingerprint().to_string(),
            // Also in a version-2 message: older builds ignore fields they do not know, and
            // newer ones read them whatever the version (rule 15).
            speaks: Some(Versions::OURS),
            timings: Some(Announced::of(&self.timings)),
            ..Message::new(self.group.clone(), self.id.clone(), body)
        }
    }

    /// Rule 15: the newest version every member speaks. A member not heard yet may be of the
    /// previous build, so it counts as speaking only our oldest version: writing the oldest
    /// costs nothing (this build's messages of either version carry the same fields, and it
    /// reads both), while writing a version a member cannot read makes it deaf to us. A member
    /// that speaks nothing we do cannot read us either way and is left out.
    pub(super) fn wire_version(&self) -> u32 {
        let ours = Versions::OURS;
        self.peers
            .iter()
            .map(|p| p.speaks.map_or(ours.oldest, |v| v.newest))
            .filter(|&v| v >= ours.oldest)
            .fold(ours.newest, u32::min)
    }

    pub(super) fn message(&mut self, body: Body) -> Message {
        self.message_for_term(self.term, body)
    }

    pub(super) fn publish(&mut self, now: Instant, m: Message) {
        self.last_sent = Some(now);
        self.actions.push_back(Action::Publish(m));
    }

    pub(super) fn persist(&mut self) {
        self.actions.push_back(Action::Persist(self.persistent()));
    }

    /// Our rank, candidacy, the members we hear and our member set, for the next heartbeat,
    /// ack or presence.
    pub(super) fn advert(&mut self, now: Instant) -> Advert {
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

    pub(super) fn send_presence(&mut self, now: Instant) {
        let advert = self.advert(now);
        let m = self.message(Body::Presence { advert });
        self.publish(now, m);
    }

    /// An ack that promises `guard` (rule 5); the guard itself was set by [`Node::follow`].
    pub(super) fn send_ack(&mut self, now: Instant, leader: &str, hb_seq: u64, guard: Duration) {
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
    pub(super) fn record_promise(&mut self, now: Instant, guard: Duration) -> bool {
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
}
