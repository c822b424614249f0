//! When a run of checks changes the verdict: `k` failures in a row take health away, `m`
//! passes in a row give it back. A pure state machine, so every threshold is tested without a
//! process or a clock.

/// The verdict and the streak that may change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    healthy: bool,
    /// Healthy at least once in this run: before that, one pass is enough (a node that starts
    /// before its application is up should not wait `m` intervals once it is).
    ever_healthy: bool,
    failures_in_row: u32,
    passes_in_row: u32,
    /// `--health-failures`: failures in a row that make a healthy node unhealthy.
    failures: u32,
    /// `--health-successes`: passes in a row that make an unhealthy node healthy again.
    successes: u32,
}

impl Verdict {
    /// Unhealthy until the first pass: nothing is known of the application yet.
    pub fn new(failures: u32, successes: u32) -> Verdict {
        Verdict {
            healthy: false,
            ever_healthy: false,
            failures_in_row: 0,
            passes_in_row: 0,
            failures: failures.max(1),
            successes: successes.max(1),
        }
    }

    pub fn healthy(&self) -> bool {
        self.healthy
    }

    pub fn failures_in_row(&self) -> u32 {
        self.failures_in_row
    }

    pub fn passes_in_row(&self) -> u32 {
        self.passes_in_row
    }

    /// Takes one check's result; `Some(healthy)` when the verdict changed with it.
    pub fn record(&mut self, passed: bool) -> Option<bool> {
        if passed {
            self.passes_in_row = self.passes_in_row.saturating_add(1);
            self.failures_in_row = 0;
            let enough = !self.ever_healthy || self.passes_in_row >= self.successes;
            if !self.healthy && enough {
                self.healthy = true;
                self.ever_healthy = true;
                return Some(true);
            }
        } else {
            self.failures_in_row = self.failures_in_row.saturating_add(1);
            self.passes_in_row = 0;
            if self.healthy && self.failures_in_row >= self.failures {
                self.healthy = false;
                return Some(false);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `results` ('+' pass, '-' fail) and returns the verdict after each.
    fn run(v: &mut Verdict, results: &str) -> String {
        results
            .chars()
            .map(|c| {
                v.record(c == '+');
                if v.healthy() {
                    'H'
                } else {
                    'u'
                }
            })
            .collect()
    }

    #[test]
    fn the_first_pass_makes_a_new_node_healthy() {
        let mut v = Verdict::new(3, 2);
        assert!(!v.healthy(), "nothing is known at start");
        assert_eq!(run(&mut v, "--+"), "uuH");
    }

    #[test]
    fn k_failures_in_a_row_take_health_away_and_a_pass_resets_the_count() {
        let mut v = Verdict::new(3, 2);
        assert_eq!(run(&mut v, "+--+--"), "HHHHHH", "never three in a row");
        assert_eq!(v.failures_in_row(), 2);
        assert_eq!(run(&mut v, "-"), "u", "the third in a row");
        assert_eq!(v.record(false), None, "already unhealthy: no change");
    }

    #[test]
    fn m_passes_in_a_row_give_it_back_after_a_loss() {
        let mut v = Verdict::new(2, 3);
        assert_eq!(run(&mut v, "+--"), "HHu");
        assert_eq!(
            run(&mut v, "++-++"),
            "uuuuu",
            "a failure restarts the count"
        );
        assert_eq!(v.passes_in_row(), 2);
        assert_eq!(run(&mut v, "+"), "H");
    }

    #[test]
    fn changes_are_reported_once() {
        let mut v = Verdict::new(1, 1);
        assert_eq!(v.record(true), Some(true));
        assert_eq!(v.record(true), None);
        assert_eq!(v.record(false), Some(false));
        assert_eq!(v.record(false), None);
        assert_eq!(v.record(true), Some(true));
    }

    #[test]
    fn zero_thresholds_count_as_one() {
        let mut v = Verdict::new(0, 0);
        assert_eq!(run(&mut v, "+-+"), "HuH");
    }
}
