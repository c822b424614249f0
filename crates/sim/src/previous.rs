//! The build before rule 15, as the simulator runs it during rolling upgrades: protocol version
//! 2 only. It is the real core behind a wire filter that does what the old parser and the old
//! rules did (docs/protocol.md, rule 15 and "What the simulator checks"):
//!
//! - a message of another version is dropped unread, as the old `Message::parse` refused it;
//! - the fields version 3 added are invisible, as unknown fields were ignored: the sender's
//!   `speaks` and `timings`, the promise of acks and votes (`guard_ms`); and the old build
//!   guarded for its own `T` whatever lease a heartbeat named, so `lease_ms` is hidden too;
//! - what it sends is version 2 without those fields.
//!
//! With those inputs the core does what the old build did: its promises last its own `T`
//! (nothing longer is ever recorded), a leader counts an ack of version 2 as a promise of its
//! own `T`, members count as live within its own `T`, and it writes version 2 because every
//! sender looks like a version-2 build.

use tokio::time::Instant;

use super::world::Protocol;
use pilot_election_core::{
    Action, Body, CommandError, Input, Member, Message, Outcome, View, PREVIOUS_VERSION,
};

/// A core behind a filter on what it reads and what it sends: the way an older rule or build
/// is brought back without a second copy of the core (the previous build here; the broken
/// variants of the harness self-tests).
pub struct Filtered {
    inner: Box<dyn Protocol>,
    /// Messages it reads at all; the others are dropped unread.
    reads: fn(&Message) -> bool,
    /// Applied to every message it reads, before the core sees it.
    inbound: fn(&mut Message),
    /// Applied to every message it sends.
    outbound: fn(&mut Message),
    /// Whether it takes [`Input::SetMaintenance`]: the previous build had no maintenance
    /// (rule 16), and its shell ignores the field that spreads it.
    maintenance: bool,
    /// Whether it takes [`Input::SetHealth`]: the previous build had no health checks
    /// (rule 17).
    health: bool,
}

impl Filtered {
    pub fn new(
        inner: Box<dyn Protocol>,
        reads: fn(&Message) -> bool,
        inbound: fn(&mut Message),
        outbound: fn(&mut Message),
    ) -> Filtered {
        Filtered {
            inner,
            reads,
            inbound,
            outbound,
            maintenance: true,
            health: true,
        }
    }

    /// The same, deaf to [`Input::SetMaintenance`].
    pub fn without_maintenance(self) -> Filtered {
        Filtered {
            maintenance: false,
            ..self
        }
    }

    /// The same, deaf to [`Input::SetHealth`].
    pub fn without_health(self) -> Filtered {
        Filtered {
            health: false,
            ..self
        }
    }

    /// The build that spoke only [`PREVIOUS_VERSION`].
    pub fn previous(inner: Box<dyn Protocol>) -> Filtered {
        Filtered::new(inner, |m| m.v == PREVIOUS_VERSION, read_as_previous, strip)
            .without_maintenance()
            .without_health()
    }
}

/// Leaves out what version 3 added, as the old build neither sent nor read it.
fn strip(m: &mut Message) {
    m.v = PREVIOUS_VERSION;
    m.speaks = None;
    m.timings = None;
    m.maintenance = None;
    match &mut m.body {
        Body::Ack { guard_ms, .. } | Body::Vote { guard_ms, .. } => *guard_ms = None,
        _ => {}
    }
    // Rule 17's word came later still: the old build neither wrote nor read it.
    match &mut m.body {
        Body::Heartbeat { advert, .. } | Body::Ack { advert, .. } | Body::Presence { advert } => {
            advert.unhealthy = false
        }
        _ => {}
    }
}

/// What the old build saw of a message: no version-3 fields, and no lease in a heartbeat.
fn read_as_previous(m: &mut Message) {
    strip(m);
    if let Body::Heartbeat { lease_ms, .. } = &mut m.body {
        *lease_ms = 0;
    }
}

impl Protocol for Filtered {
    fn handle(&mut self, now: Instant, input: Input) -> Result<Outcome, CommandError> {
        let input = match input {
            Input::Message(m) if !(self.reads)(&m) => return Ok(Outcome::Ignored),
            Input::SetMaintenance { .. } if !self.maintenance => return Ok(Outcome::Ignored),
            Input::SetHealth { .. } if !self.health => return Ok(Outcome::Ignored),
            Input::Message(mut m) => {
                (self.inbound)(&mut m);
                Input::Message(m)
            }
            other => other,
        };
        self.inner.handle(now, input)
    }

    fn poll_action(&mut self) -> Option<Action> {
        match self.inner.poll_action()? {
            Action::Publish(mut m) => {
                (self.outbound)(&mut m);
                Some(Action::Publish(m))
            }
            other => Some(other),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }

    fn view(&self, now: Instant) -> View {
        self.inner.view(now)
    }

    fn has_successor(&self, now: Instant) -> bool {
        self.inner.has_successor(now)
    }

    fn peers(&self, now: Instant) -> Vec<Member> {
        self.inner.peers(now)
    }

    fn twin(&self) -> Option<Box<dyn Protocol>> {
        let inner = self.inner.twin()?;
        Some(Box::new(Filtered {
            inner,
            reads: self.reads,
            inbound: self.inbound,
            outbound: self.outbound,
            maintenance: self.maintenance,
            health: self.health,
        }))
    }

    fn digest(&self) -> String {
        self.inner.digest()
    }

    fn beat_check(&self) -> Option<(Instant, Instant, std::time::Duration)> {
        self.inner.beat_check()
    }
}
