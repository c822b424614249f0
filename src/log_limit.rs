//! A budget of log lines per second: a flood of refusals (or failed handshakes) must not become
//! a flood of log lines (disk and CPU); the next line logged counts those left out.

use std::time::Duration;

use tokio::time::Instant;

/// At most `per_second` lines in each one-second window, with a count of those left out.
#[derive(Debug)]
pub struct LogLimit {
    per_second: u32,
    window: Option<Instant>,
    logged: u32,
    left_out: u64,
}

impl LogLimit {
    pub const fn new(per_second: u32) -> LogLimit {
        LogLimit {
            per_second,
            window: None,
            logged: 0,
            left_out: 0,
        }
    }

    /// Whether to log a line at `now`, with how many were left out since the last one logged.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .window
            .is_none_or(|w| now >= w + Duration::from_secs(1))
        {
            self.window = Some(now);
            self.logged = 0;
        }
        if self.logged >= self.per_second {
            self.left_out += 1;
            return None;
        }
        self.logged += 1;
        Some(std::mem::take(&mut self.left_out))
    }
}
