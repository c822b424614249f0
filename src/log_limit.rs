//! Log throttling, the one implementation: a flood of refusals, failed handshakes, failed
//! accepts or stray senders must not become a flood of log lines (disk and CPU), and the next
//! line logged counts those left out.
//!
//! - [`LogLimit`]: at most so many lines per window (refused mutations: 20 a second; failed TLS
//!   handshakes: 5 a second; failed accepts: one per 10 s).
//! - [`KeyedLogLimit`]: at most one line per key per window, and at most so many keys named per
//!   window (stray senders: each named once a minute, at most 32 of them), so that a flood of
//!   made-up keys costs neither a line nor memory each.
//!
//! Pure values: the caller says what time it is.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// At most `lines` lines in each window of `window` (which starts with the first line after
/// the previous one ended), with a count of those left out.
#[derive(Debug)]
pub struct LogLimit {
    lines: u32,
    window_len: Duration,
    window: Option<Instant>,
    logged: u32,
    left_out: u64,
}

impl LogLimit {
    /// At most `lines` lines a second.
    pub const fn per_second(lines: u32) -> LogLimit {
        LogLimit::new(lines, Duration::from_secs(1))
    }

    /// At most `lines` lines in each window of `window`.
    pub const fn new(lines: u32, window: Duration) -> LogLimit {
        LogLimit {
            lines,
            window_len: window,
            window: None,
            logged: 0,
            left_out: 0,
        }
    }

    /// Whether to log a line at `now`, with how many were left out since the last one logged.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.window_over(now) {
            self.window = Some(now);
            self.logged = 0;
        }
        if self.logged >= self.lines {
            self.left_out += 1;
            return None;
        }
        self.logged += 1;
        Some(std::mem::take(&mut self.left_out))
    }

    /// Whether the window of the last line logged has ended by `now` (or none was logged).
    fn window_over(&self, now: Instant) -> bool {
        self.window.is_none_or(|w| now >= w + self.window_len)
    }
}

/// At most one line per key in each window of `every`, and at most `max_keys` keys named in
/// one; the lines of keys left out for want of room are counted, and the next line logged says
/// how many. A key's own repeats within its window are neither logged nor counted (its next line
/// names it again).
#[derive(Debug)]
pub struct KeyedLogLimit<K> {
    every: Duration,
    max_keys: usize,
    named: BTreeMap<K, LogLimit>,
    left_out: u64,
}

impl<K: Ord> KeyedLogLimit<K> {
    pub const fn new(every: Duration, max_keys: usize) -> KeyedLogLimit<K> {
        KeyedLogLimit {
            every,
            max_keys,
            named: BTreeMap::new(),
            left_out: 0,
        }
    }

    /// `Some(left out before this one)` when `key` gets a line at `now`.
    pub fn admit(&mut self, now: Instant, key: K) -> Option<u64> {
        if !self.named.contains_key(&key) && self.named.len() >= self.max_keys {
            self.named.retain(|_, limit| !limit.window_over(now));
            if self.named.len() >= self.max_keys {
                self.left_out += 1;
                return None;
            }
        }
        let every = self.every;
        self.named
            .entry(key)
            .or_insert_with(|| LogLimit::new(1, every))
            .admit(now)?;
        Some(std::mem::take(&mut self.left_out))
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.named.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any instant will do: every time here is an offset from it.
    #[allow(clippy::disallowed_methods)]
    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn so_many_lines_a_window_and_the_next_window_counts_those_left_out() {
        let mut log = LogLimit::per_second(20);
        let t0 = t0();
        let first: Vec<_> = (0..25).map(|_| log.admit(t0)).collect();
        assert_eq!(first.iter().filter(|x| x.is_some()).count(), 20);
        assert!(first[..20].iter().all(|x| *x == Some(0)));
        assert_eq!(log.admit(t0 + Duration::from_millis(999)), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(1)), Some(6));
        assert_eq!(log.admit(t0 + Duration::from_secs(1)), Some(0));
    }

    #[test]
    fn one_line_per_long_window_starts_its_window_at_the_line() {
        let mut log = LogLimit::new(1, Duration::from_secs(10));
        let t0 = t0();
        assert_eq!(log.admit(t0), Some(0));
        assert_eq!(log.admit(t0 + Duration::from_secs(9)), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(10)), Some(1));
        assert_eq!(log.admit(t0 + Duration::from_secs(19)), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(25)), Some(1));
    }

    #[test]
    fn each_key_once_a_window_and_a_flood_of_keys_is_counted_not_named() {
        const MAX: usize = 32;
        let every = Duration::from_secs(60);
        let mut log = KeyedLogLimit::new(every, MAX);
        let t0 = t0();
        let key = |from: &str, why: &'static str| (from.to_string(), why);
        assert_eq!(log.admit(t0, key("x", "not_member")), Some(0));
        assert_eq!(log.admit(t0, key("x", "not_member")), None, "once a window");
        assert_eq!(log.admit(t0, key("x", "other_members")), Some(0), "per key");
        for i in 0..10_000 {
            let named = log.admit(t0, key(&format!("fake-{i}"), "not_member"));
            assert_eq!(named.is_some(), i < MAX - 2, "sender {i}");
        }
        assert!(log.keys() <= MAX, "bounded: {}", log.keys());
        assert_eq!(
            log.admit(t0, key("x", "not_member")),
            None,
            "still within its window"
        );
        // A window later the next line names its key and how many were left out.
        let later = t0 + every;
        assert_eq!(
            log.admit(later, key("y", "not_member")),
            Some(10_000 - (MAX as u64 - 2))
        );
        assert_eq!(log.admit(later, key("x", "not_member")), Some(0));
    }
}
