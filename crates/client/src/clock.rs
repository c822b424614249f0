//! The two clocks the client reads, each through one call (the workspace's clippy.toml bans
//! reading them anywhere else).
//!
//! Durations and deadlines are measured on tokio's clock ([`now`], monotonic), so that tests
//! with a paused tokio clock and the timers agree. A monotonic clock stops while the host is
//! suspended, though, and a lease does not: the node measures its lease on `CLOCK_BOOTTIME`.
//! So every lease deadline is also kept on the wall clock ([`wall`]), which runs on through a
//! suspend, and the work is cancelled when *either* clock says the deadline passed. A wall
//! clock that steps forward can only cancel early (safe); one that steps back leaves the
//! monotonic deadline in charge.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// The current instant on tokio's (monotonic) clock.
#[allow(clippy::disallowed_methods)] // the one monotonic read of the client
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// The wall clock, only as a suspend guard beside [`now`] (see the module docs).
#[allow(clippy::disallowed_methods)] // the one wall-clock read of the client
pub(crate) fn wall() -> SystemTime {
    SystemTime::now()
}

/// How long ago `earlier` (an instant of [`now`]) was.
pub(crate) fn since(earlier: Instant) -> Duration {
    now().saturating_duration_since(earlier)
}

/// Sleeps until [`now`] reaches `deadline` (at once if it has).
pub(crate) async fn sleep_until(deadline: Instant) {
    tokio::time::sleep(deadline.saturating_duration_since(now())).await
}

/// A small pseudo-random fraction in `[0, 1)` for backoff jitter, from the wall clock's
/// nanoseconds: enough to keep many clients from reconnecting in lockstep.
pub(crate) fn jitter() -> f64 {
    let nanos = wall()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // A multiplicative hash spreads consecutive readings over the whole range.
    f64::from(nanos.wrapping_mul(2_654_435_761) % 1_000_000) / 1_000_000.0
}
