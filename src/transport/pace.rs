//! How fast a transport may be handed wire messages, and the one token bucket that keeps to a
//! pace: the runtime's outbox holds a turn's messages with it (rule 18), and the pilot
//! transport's publishing connection holds itself to the broker's limit with it.

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket's refill rate and size: `per_second` tokens a second, at most `burst` held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    pub per_second: f64,
    pub burst: f64,
}

/// What may still be sent now at a [`Pace`]. A spend may take it below zero, by a burst at
/// most: a large send is paid for by what comes after it.
#[derive(Debug, Clone)]
pub struct Bucket {
    pace: Pace,
    tokens: f64,
    /// When `tokens` was counted.
    at: Instant,
}

impl Bucket {
    pub fn full(pace: Pace, now: Instant) -> Bucket {
        Bucket {
            pace,
            tokens: pace.burst,
            at: now,
        }
    }

    /// The tokens at `now`, refilled since they were last counted.
    pub fn refill(&mut self, now: Instant) -> f64 {
        let since = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + since * self.pace.per_second).min(self.pace.burst);
        self.at = now;
        self.tokens
    }

    /// Spends `n` tokens counted at the last [`Self::refill`].
    pub fn spend(&mut self, n: f64) {
        self.tokens = (self.tokens - n).max(-self.pace.burst);
    }

    /// When the next whole token is there; `None` when one is there already.
    pub fn ready_at(&self) -> Option<Instant> {
        (self.tokens < 1.0)
            .then(|| self.at + Duration::from_secs_f64((1.0 - self.tokens) / self.pace.per_second))
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        match self.ready_at() {
            None => {
                self.spend(1.0);
                Ok(())
            }
            Some(at) => Err(at.saturating_duration_since(now)),
        }
    }
}
