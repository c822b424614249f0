//! The exit budget: a stopping node must be gone within Docker's default 10 s stop timeout, or
//! Docker's SIGKILL turns a handover into a failover. Each stage has its own share; the test
//! below keeps their sum under [`STOP_TIMEOUT`].

use std::time::Duration;

/// How long a stopping node first waits for its `--exec` child to stop (the `--exec`
/// supervisor's drain grace, `exec::DRAIN_GRACE`, for every planned handover).
pub const EXEC_DRAIN: Duration = Duration::from_secs(1);
/// How long a stopping leader waits for its successor before it leaves anyway (the core's
/// stop policy, `election::stop`).
pub const HANDOVER: Duration = crate::election::stop::HANDOVER_GRACE;
/// How long after the stop begins an `--on-change` run may go on (then it is killed). Not a
/// stage of its own: a leader's last run holds its resign, and that wait is counted in the
/// handover's grace (it runs from before the resign); a follower's runs end while the server
/// closes. So it must stay below [`HANDOVER`], with room for the successor to win.
pub const HOOK_ON_EXIT: Duration = Duration::from_secs(3);
/// How long the exit waits for the last history and replay marks to reach the disk and the
/// last messages to leave (an http request is a task and a pilot publish was a child process:
/// exiting at once killed a stopping leader's resign, and the followers waited out `T`).
pub const FLUSH: Duration = Duration::from_secs(1);
/// How long open requests (event streams end with the loop) get to finish.
pub const SERVER_CLOSE: Duration = Duration::from_secs(2);
/// What the process waits for leftover blocking work (a stuck disk write) before exiting.
pub const LEFTOVER_BLOCKING: Duration = Duration::from_millis(500);
/// Docker's default stop timeout, which the sum must stay under.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a stop can take.
pub const fn total() -> Duration {
    Duration::from_millis(
        EXEC_DRAIN.as_millis() as u64
            + HANDOVER.as_millis() as u64
            + FLUSH.as_millis() as u64
            + SERVER_CLOSE.as_millis() as u64
            + LEFTOVER_BLOCKING.as_millis() as u64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_hook_run_fits_in_the_handover_grace() {
        assert!(HOOK_ON_EXIT + Duration::from_millis(500) <= HANDOVER);
    }

    #[test]
    fn a_stop_fits_in_dockers_grace_with_a_second_to_spare() {
        assert!(
            total() + Duration::from_secs(1) <= STOP_TIMEOUT,
            "{:?}",
            total()
        );
    }
}
