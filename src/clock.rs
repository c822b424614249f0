//! The one clock that leases, guards and every other protocol timer are measured on
//! (docs/protocol.md, rule 14).
//!
//! Leases are only safe if every node's clock runs at close to the true rate, and that includes
//! time the host spent suspended: a leader whose VM is paused for a minute must find its lease
//! long gone when it resumes. `CLOCK_MONOTONIC` (what `tokio::time::Instant` and
//! `std::time::Instant` read on Linux) stops during a suspend; `CLOCK_BOOTTIME` does not. So
//! [`now`] reads `CLOCK_BOOTTIME` and expresses it as a `tokio::time::Instant` (anchored at the
//! first call), which keeps the core's and the API's arithmetic unchanged. Tokio's timers run
//! on `CLOCK_MONOTONIC`, so a timer armed before a suspend would still wait out its whole
//! duration after the host is back; [`sleep_until`] therefore sleeps in slices of at most
//! [`SLEEP_SLICE`] and re-reads [`now`] after each, so a sleep that spans a suspend ends at most
//! one slice after the host is back (the `--exec` supervisor must kill a resumed ex-leader's
//! child within the gap `h` that rule 7 leaves after every lease).
//!
//! On systems without `CLOCK_BOOTTIME` the monotonic clock is used (and a suspended host could
//! keep a stale lease; Linux is the supported platform).

pub mod wall;

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

struct Anchor {
    instant: Instant,
    boot: Duration,
}

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

#[cfg(target_os = "linux")]
fn boottime() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(ts) => Duration::new(ts.tv_sec() as u64, ts.tv_nsec() as u32),
        // Cannot fail for this clock id on Linux; never panic in the time source.
        Err(_) => monotonic_fallback(),
    }
}

#[cfg(not(target_os = "linux"))]
fn boottime() -> Duration {
    monotonic_fallback()
}

#[allow(clippy::disallowed_methods)] // the fallback clock itself
fn monotonic_fallback() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    Instant::now().saturating_duration_since(start)
}

/// The current time on the suspend-aware clock.
#[allow(clippy::disallowed_methods)] // the anchor: the only tokio `now` the clock reads
pub fn now() -> Instant {
    let a = ANCHOR.get_or_init(|| Anchor {
        instant: Instant::now(),
        boot: boottime(),
    });
    a.instant + boottime().saturating_sub(a.boot)
}

/// How long ago `earlier` (an instant of [`now`]) was, on the same clock. `Instant::elapsed`
/// would read tokio's clock instead, which stops while the host is suspended (clippy bans it).
pub fn since(earlier: Instant) -> Duration {
    now().saturating_duration_since(earlier)
}

/// The longest tokio sleep [`sleep_until`] takes before it looks at [`now`] again: how late a
/// deadline that a suspend passed can be noticed. Ten wake-ups a second cost nothing measurable.
pub const SLEEP_SLICE: Duration = Duration::from_millis(100);

/// Sleeps until [`now`] reaches `deadline` (at once if it has), also across a suspend.
pub async fn sleep_until(deadline: Instant) {
    loop {
        let left = deadline.saturating_duration_since(now());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(SLEEP_SLICE)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_moves_forward_with_real_time() {
        let a = now();
        std::thread::sleep(Duration::from_millis(20));
        let b = now();
        assert!(b >= a + Duration::from_millis(20), "{:?}", b - a);
        assert!(b < a + Duration::from_secs(5));
    }

    #[tokio::test]
    async fn sleep_until_waits_for_the_deadline() {
        let deadline = now() + Duration::from_millis(30);
        sleep_until(deadline).await;
        assert!(now() >= deadline);
        // Longer than a slice: still exactly until the deadline, not one slice.
        let deadline = now() + SLEEP_SLICE * 2 + Duration::from_millis(30);
        sleep_until(deadline).await;
        assert!(now() >= deadline);
        // A deadline in the past returns at once.
        sleep_until(now() - Duration::from_millis(1)).await;
    }
}
