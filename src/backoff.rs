//! Exponential backoff: a wait that starts at `initial` and doubles after each use, up to `max`.
//! The one implementation behind every retry and restart in the service (the `--exec` child's
//! restarts, pilotctl's publish retries and subscriptions, a silent broker's replacements).
//!
//! A pure value: it reads no clock and draws no randomness. The caller sleeps, and says when
//! the run of failures is over ([`Backoff::reset`]). None of its users jitters its waits: each
//! node retries its own child or its own link, so there is no herd to spread.

use std::time::Duration;

/// Waits of `initial`, `2 × initial`, `4 × initial`, ... up to `max`, then `max` for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// A backoff whose next wait is `initial`. Panics (at compile time in a `const`) if
    /// `initial` exceeds `max`.
    pub const fn new(initial: Duration, max: Duration) -> Backoff {
        assert!(initial.as_nanos() <= max.as_nanos(), "initial exceeds max");
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The wait to use now; the one after it doubles, up to the maximum.
    pub fn next_delay(&mut self) -> Duration {
        let now = self.next;
        self.next = now.saturating_mul(2).min(self.max);
        now
    }

    /// Starts over: the next wait is the initial one again.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// The wait after `n` failures in a row without keeping a count here: `initial` for 0, then
    /// doubling up to the maximum (as `n + 1` calls of [`Backoff::next_delay`] would end with).
    pub fn nth(&self, n: u32) -> Duration {
        let mut wait = self.initial;
        for _ in 0..n {
            if wait >= self.max {
                break;
            }
            wait = wait.saturating_mul(2).min(self.max);
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_from_the_initial_wait_up_to_the_maximum_and_stays_there() {
        let mut b = Backoff::new(100 * MS, 2000 * MS);
        let waits: Vec<u128> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
    }

    #[test]
    fn a_reset_starts_over() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        b.next_delay();
        b.next_delay();
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
        assert_eq!(b.next_delay(), Duration::from_secs(2));
    }

    #[test]
    fn a_maximum_that_is_not_a_doubling_of_the_initial_wait_is_reached_exactly() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let waits: Vec<u64> = (0..7).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn the_nth_wait_is_what_as_many_uses_give_and_never_overflows() {
        let b = Backoff::new(4 * 1000 * MS, 16 * 1000 * MS);
        let mut used = b;
        for n in 0..10 {
            assert_eq!(b.nth(n), used.next_delay(), "n = {n}");
        }
        assert_eq!(b.nth(u32::MAX), Duration::from_secs(16));
        let huge = Backoff::new(Duration::from_secs(1), Duration::MAX);
        assert_eq!(huge.nth(200), Duration::MAX);
    }

    #[test]
    fn a_constant_wait_is_a_backoff_whose_maximum_is_its_initial_wait() {
        let mut b = Backoff::new(50 * MS, 50 * MS);
        assert!((0..5).all(|_| b.next_delay() == 50 * MS));
    }
}
