//! Which messages from stray senders (non-members, or members with another member set) get a
//! log line. An operator must see a stray node at once, by name; a flood of made-up sender ids
//! must cost neither a log line nor memory each. So each (sender, reason) is named at most once
//! per [`EVERY`], and at most [`MAX_NAMED`] senders per [`EVERY`]; the rest are counted, and the
//! next line that is written says how many were left out (the metrics count every message).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// At most one line per stray sender and reason in this long.
pub(super) const EVERY: Duration = Duration::from_secs(60);
/// Distinct senders named per [`EVERY`]; a real misconfiguration involves a handful.
pub(super) const MAX_NAMED: usize = 32;

#[derive(Debug, Default)]
pub(super) struct StrayLog {
    named: BTreeMap<(String, &'static str), Instant>,
    /// Messages of senders not named since the last line written.
    left_out: u64,
}

impl StrayLog {
    /// `Some(left out before this one)` when this message gets a line.
    pub(super) fn admit(&mut self, now: Instant, from: &str, why: &'static str) -> Option<u64> {
        let key = (from.to_string(), why);
        if self.named.get(&key).is_some_and(|at| now < *at + EVERY) {
            return None;
        }
        if self.named.len() >= MAX_NAMED {
            self.named.retain(|_, at| now < *at + EVERY);
            if self.named.len() >= MAX_NAMED {
                self.left_out += 1;
                return None;
            }
        }
        self.named.insert(key, now);
        Some(std::mem::take(&mut self.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sender_once_a_minute_and_a_flood_of_ids_is_counted_not_named() {
        // Any instant will do: every time here is an offset from it.
        #[allow(clippy::disallowed_methods)]
        let t0 = Instant::now();
        let mut log = StrayLog::default();
        assert_eq!(log.admit(t0, "x", "not_member"), Some(0));
        assert_eq!(log.admit(t0, "x", "not_member"), None, "once a minute");
        assert_eq!(log.admit(t0, "x", "other_members"), Some(0), "per reason");
        for i in 0..10_000 {
            let named = log.admit(t0, &format!("fake-{i}"), "not_member");
            assert_eq!(named.is_some(), i < MAX_NAMED - 2, "sender {i}");
        }
        assert!(log.named.len() <= MAX_NAMED, "bounded: {}", log.named.len());
        assert_eq!(
            log.admit(t0, "x", "not_member"),
            None,
            "still within its minute"
        );
        // A minute later the next line names its sender and how many were left out.
        let later = t0 + EVERY;
        assert_eq!(
            log.admit(later, "y", "not_member"),
            Some(10_000 - (MAX_NAMED as u64 - 2))
        );
        assert_eq!(log.admit(later, "x", "not_member"), Some(0));
    }
}
