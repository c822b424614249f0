//! Which change the hook runs next: one run at a time, and the newest change wins. A pure state
//! machine over the changes' numbers (no time, no process), so that what is run, what is
//! skipped and when a resign may leave are unit-tested here.

/// The hook's queue, by change number (`Change::seq`, 1 for the first).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Serial {
    /// The newest change offered.
    latest: u64,
    /// The change whose run is in progress.
    running: Option<u64>,
    /// The change of the last run started.
    started: u64,
    /// Every change up to this one is settled: run to its end, or made obsolete by a newer one
    /// whose run has ended.
    done: u64,
}

/// A run to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Start {
    pub(super) seq: u64,
    /// Changes that arrived since the last run started and are never run: a newer one came.
    pub(super) skipped: u64,
}

impl Serial {
    /// A change was reported; numbers never go back.
    pub(super) fn offer(&mut self, seq: u64) {
        self.latest = self.latest.max(seq);
    }

    /// The run to start now: none while one is in progress, else the newest change not run.
    pub(super) fn next(&mut self) -> Option<Start> {
        if self.running.is_some() || self.latest <= self.started {
            return None;
        }
        let start = Start {
            seq: self.latest,
            skipped: self.latest - self.started - 1,
        };
        self.running = Some(self.latest);
        self.started = self.latest;
        Some(start)
    }

    /// The run in progress has ended (however: exit, timeout, kill). Returns the number every
    /// change up to which is now settled.
    pub(super) fn finished(&mut self) -> u64 {
        if let Some(seq) = self.running.take() {
            self.done = self.done.max(seq);
        }
        self.done
    }

    /// Whether change `seq` is settled: what a resign that follows it waits for (the runner
    /// publishes [`Serial::finished`]'s number, which the release guard compares the same way).
    #[cfg(test)]
    pub(super) fn settled(&self, seq: u64) -> bool {
        self.done >= seq
    }

    pub(super) fn running(&self) -> Option<u64> {
        self.running
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(seq: u64, skipped: u64) -> Option<Start> {
        Some(Start { seq, skipped })
    }

    #[test]
    fn one_change_runs_once() {
        let mut s = Serial::default();
        assert_eq!(s.next(), None, "nothing offered yet");
        s.offer(1);
        assert_eq!(s.next(), start(1, 0));
        assert_eq!(s.next(), None, "one run at a time");
        assert!(!s.settled(1));
        assert_eq!(s.finished(), 1);
        assert!(s.settled(1));
        assert_eq!(s.next(), None, "nothing new: not run again");
        s.offer(1);
        assert_eq!(
            s.next(),
            None,
            "the same change offered again is not run again"
        );
    }

    #[test]
    fn changes_during_a_run_collapse_to_the_newest() {
        let mut s = Serial::default();
        s.offer(1);
        assert_eq!(s.next(), start(1, 0));
        for seq in 2..=5 {
            s.offer(seq);
            assert_eq!(s.next(), None, "{seq} waits for the run in progress");
        }
        assert_eq!(s.running(), Some(1));
        assert_eq!(s.finished(), 1);
        assert!(!s.settled(5), "5 is not run yet");
        assert_eq!(s.next(), start(5, 3), "2, 3 and 4 are skipped, 5 runs");
        assert_eq!(s.finished(), 5);
        assert!(s.settled(2) && s.settled(5));
        assert_eq!(s.next(), None);
    }

    #[test]
    fn an_older_number_offered_late_changes_nothing() {
        let mut s = Serial::default();
        s.offer(4);
        assert_eq!(s.next(), start(4, 3));
        s.offer(2);
        s.finished();
        assert_eq!(s.next(), None);
        assert!(s.settled(4));
    }

    #[test]
    fn a_resign_waits_for_the_newest_change_not_for_the_run_in_progress() {
        // The node became leader (2) while the start run (1) was in progress, then stepped down
        // (3): the resign after 3 may leave only once a run of 3 has ended, and the run of 2 is
        // never started.
        let mut s = Serial::default();
        s.offer(1);
        assert_eq!(s.next(), start(1, 0));
        s.offer(2);
        s.offer(3);
        assert_eq!(s.finished(), 1);
        assert!(!s.settled(3), "ending the run of 1 settles nothing newer");
        assert_eq!(s.next(), start(3, 1));
        assert!(!s.settled(3), "not while its run is in progress");
        s.offer(4);
        assert_eq!(s.finished(), 3);
        assert!(s.settled(3), "3 has run");
        assert!(!s.settled(4));
        assert_eq!(s.next(), start(4, 0));
    }

    #[test]
    fn finishing_with_no_run_in_progress_settles_nothing() {
        let mut s = Serial::default();
        s.offer(3);
        assert_eq!(s.finished(), 0);
        assert!(!s.settled(1));
        assert_eq!(s.next(), start(3, 2));
    }
}
