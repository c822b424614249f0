//! [`Fence`]: the highest term seen, and the refusal of anything lower.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::StaleTerm;

/// Keeps the highest term it has seen and refuses a lower one: the check a resource makes on
/// every write that carries a leader's term (its fencing token).
///
/// Terms only grow, across restarts too, so a write carrying a term lower than one already
/// seen comes from a deposed leader (a paused process, a write that was in flight while the
/// next leader was elected) and must not be applied. An equal term is accepted: it is the same
/// leader. The check and the update are one atomic step, so a `Fence` can be shared between
/// threads (it is `Sync`; put it in an `Arc`).
///
/// A `Fence` in memory protects one process's resource. When the resource is a database or a
/// key-value store shared by several processes, the same rule belongs *in* the store, in the
/// same transaction as the write (see the [crate docs](crate#fencing-the-writes)).
///
/// ```
/// use pilot_election_client::Fence;
///
/// let fence = Fence::new();
/// fence.check(5).unwrap(); // the leader of term 5 writes
/// fence.check(6).unwrap(); // its successor writes: 6 is now the highest
/// let stale = fence.check(5).unwrap_err(); // a late write of the deposed leader
/// assert_eq!((stale.term, stale.highest), (5, 6));
/// assert_eq!(
///     stale.to_string(),
///     "stale term 5: term 6 has already been seen, so term 5's leader is deposed"
/// );
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    highest: AtomicU64,
}

impl Fence {
    /// A fence that has seen no term yet (it accepts any).
    pub fn new() -> Fence {
        Fence::default()
    }

    /// A fence that has already seen `highest` (such as the term stored beside the resource,
    /// read back at start-up).
    pub fn starting_at(highest: u64) -> Fence {
        Fence {
            highest: AtomicU64::new(highest),
        }
    }

    /// Accepts `term` if it is at least the highest seen, and makes it the highest; refuses it
    /// with both terms otherwise, leaving the fence as it was.
    pub fn check(&self, term: u64) -> Result<(), StaleTerm> {
        let before = self.highest.fetch_max(term, Ordering::AcqRel);
        if term < before {
            Err(StaleTerm {
                term,
                highest: before,
            })
        } else {
            Ok(())
        }
    }

    /// The highest term seen so far (0 before any).
    pub fn highest(&self) -> u64 {
        self.highest.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn accepts_equal_and_higher_and_refuses_lower_with_both_terms() {
        let f = Fence::new();
        assert_eq!(f.highest(), 0);
        assert!(f.check(0).is_ok());
        assert!(f.check(3).is_ok());
        assert!(f.check(3).is_ok(), "the same leader writes again");
        assert_eq!(
            f.check(2),
            Err(StaleTerm {
                term: 2,
                highest: 3
            })
        );
        assert_eq!(f.highest(), 3, "a refused term leaves the fence as it was");
        assert!(f.check(u64::MAX).is_ok());
        let e = f.check(7).unwrap_err();
        assert!(e.to_string().contains("stale term 7"), "{e}");
        assert!(e.to_string().contains(&u64::MAX.to_string()), "{e}");
    }

    #[test]
    fn starting_at_refuses_what_came_before() {
        let f = Fence::starting_at(10);
        assert_eq!(f.check(9).unwrap_err().highest, 10);
        assert!(f.check(10).is_ok());
    }

    /// Many threads racing rising terms: the fence ends at the maximum, and every refusal
    /// names a term that really was below one accepted before it.
    #[test]
    fn concurrent_checks_keep_the_maximum() {
        let f = Arc::new(Fence::new());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let mut refused = 0;
                    for i in 0..10_000u64 {
                        let term = i * 4 + t;
                        if let Err(e) = f.check(term) {
                            assert!(e.term < e.highest);
                            refused += 1;
                        }
                    }
                    refused
                })
            })
            .collect();
        let refused: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(f.highest(), 9_999 * 4 + 3);
        assert!(refused < 40_000);
    }
}
