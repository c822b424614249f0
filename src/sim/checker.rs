//! The safety invariants, checked after every simulated event.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::election::{Config, Persistent, Role, Timings, View};

/// One broken invariant, with the true time it was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub at: Duration,
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {:.3}s: {}", self.at.as_secs_f64(), self.what)
    }
}

/// Records what nodes did and complains the moment an invariant breaks.
#[derive(Debug)]
pub struct Checker {
    timings: Timings,
    leaders_by_term: HashMap<u64, String>,
    max_term: Vec<u64>,
    votes: HashMap<(usize, u64), String>,
    pub violations: Vec<Violation>,
}

/// Enough to diagnose a seed; more would only repeat the first failure.
const MAX_VIOLATIONS: usize = 8;

impl Checker {
    pub fn new(size: usize, timings: Timings) -> Checker {
        Checker {
            timings,
            leaders_by_term: HashMap::new(),
            max_term: vec![0; size],
            votes: HashMap::new(),
            violations: Vec::new(),
        }
    }

    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    pub fn violate(&mut self, now_ns: u64, what: impl Into<String>) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation {
                at: Duration::from_nanos(now_ns),
                what: what.into(),
            });
        }
    }

    /// Terms never decrease on disk; at most one real vote per node per term.
    pub fn on_persist(&mut self, now: u64, node: usize, old: &Persistent, new: &Persistent) {
        if new.term < old.term {
            self.violate(
                now,
                format!("node {node} persisted term {} after {}", new.term, old.term),
            );
        }
        if let Some(v) = &new.voted_for {
            if let Some(prev) = self.votes.insert((node, new.term), v.clone()) {
                if prev != *v {
                    self.violate(
                        now,
                        format!(
                            "node {node} voted twice in term {}: {prev} then {v}",
                            new.term
                        ),
                    );
                }
            }
        }
    }

    /// Terms never decrease, across restarts; at most one leader per term.
    pub fn on_view(&mut self, now: u64, node: usize, config: &Config, view: &View) {
        if view.term < self.max_term[node] {
            self.violate(
                now,
                format!(
                    "{} went back from term {} to {}",
                    config.node_id, self.max_term[node], view.term
                ),
            );
        }
        self.max_term[node] = self.max_term[node].max(view.term);
        if view.role == Role::Leader {
            let holder = self
                .leaders_by_term
                .entry(view.term)
                .or_insert_with(|| config.node_id.clone());
            if *holder != config.node_id {
                let text = format!(
                    "two leaders in term {}: {} and {}",
                    view.term, holder, config.node_id
                );
                self.violate(now, text);
            }
        }
    }

    /// Never two nodes with an unexpired lease at the same true time.
    pub fn on_claims(&mut self, now: u64, claimants: &[String]) {
        if claimants.len() > 1 {
            self.violate(
                now,
                format!(
                    "{} nodes hold a lease at once: {:?}",
                    claimants.len(),
                    claimants
                ),
            );
        }
    }
}
