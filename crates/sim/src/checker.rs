//! The safety invariants (docs/protocol.md, "What the simulator checks"), checked after every
//! simulated event and at every send.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use pilot_election_core::{Body, Config, Message, Persistent, Role, Timings, View};

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
    leaders_by_term: HashMap<u64, String>,
    max_term: Vec<u64>,
    votes: HashMap<(usize, u64), String>,
    pub violations: Vec<Violation>,
    /// Since when (true ns) no node has answered as leader; `None` while one does.
    pub claimless_since: Option<u64>,
    /// Every finished stretch `(start, end)` (true ns) in which no node answered as leader.
    /// Handover gaps are measured from these, at the events where claims change, rather than by
    /// sampling, which would round every gap up to the sampling step.
    pub claim_gaps: Vec<(u64, u64)>,
}

/// Enough to diagnose a seed; more would only repeat the first failure.
const MAX_VIOLATIONS: usize = 8;

impl Checker {
    pub fn new(size: usize) -> Checker {
        Checker {
            leaders_by_term: HashMap::new(),
            max_term: vec![0; size],
            votes: HashMap::new(),
            violations: Vec::new(),
            claimless_since: Some(0),
            claim_gaps: Vec::new(),
        }
    }

    /// The first stretch without any claim that began at or after `from` (true ns): its
    /// length, or `None` if none began, or it has not ended yet.
    pub fn first_claim_gap_after(&self, from: u64) -> Option<Duration> {
        self.claim_gaps
            .iter()
            .find(|(start, _)| *start >= from)
            .map(|(start, end)| Duration::from_nanos(end - start))
    }

    /// `node` sent a leader's word (a heartbeat, an announcement) in `term`: it led then, if only
    /// within one step (elected and resigned before its view was taken). Two in one term are two
    /// leaders.
    pub fn on_leader_word(&mut self, now: u64, node: &str, term: u64) {
        let holder = self
            .leaders_by_term
            .entry(term)
            .or_insert_with(|| node.to_string());
        if holder != node {
            let text = format!("two leaders in term {term}: {holder} and {node} (its word)");
            self.violate(now, text);
        }
    }

    /// The node that led in `term`, once one has (at most one ever does).
    pub fn leader_of(&self, term: u64) -> Option<&str> {
        self.leaders_by_term.get(&term).map(String::as_str)
    }

    pub fn violate(&mut self, now_ns: u64, what: impl Into<String>) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation {
                at: Duration::from_nanos(now_ns),
                what: what.into(),
            });
        }
    }

    /// Rule 7, worked out here rather than by the core's validation (which a bug may weaken):
    /// the timings a node starts with leave a gap of at least `h` after its lease, with its
    /// clock at either end of its drift bound, `T ≥ L·(1+r)/(1−r) + h`. Every violation this
    /// check reports starts with "rule 7".
    pub fn on_start(&mut self, now: u64, id: &str, t: &Timings) {
        let r = t.max_drift;
        let floor = t.lease.as_secs_f64() * (1.0 + r) / (1.0 - r) + t.heartbeat.as_secs_f64();
        // A microsecond of slack for the rounding of durations to nanoseconds.
        if !(0.0..1.0).contains(&r) || t.election_timeout.as_secs_f64() + 1e-6 < floor {
            let what = format!(
                "rule 7: {id} started with T {:?} below L(1+r)/(1-r) + h = {floor:.6}s (L {:?}, h {:?}, r {r})",
                t.election_timeout, t.lease, t.heartbeat
            );
            self.violate(now, what);
        }
        // Messages carry h, L and T in whole milliseconds and receivers refuse h >= L as
        // carried: timings they cannot carry exactly would round, perhaps to h = L, and every
        // message of the node would be dropped (a silent member).
        let whole = |d: Duration| d.subsec_nanos() % 1_000_000 == 0;
        if ![t.heartbeat, t.lease, t.election_timeout]
            .into_iter()
            .all(whole)
            || t.heartbeat >= t.lease
        {
            let what = format!(
                "rule 7: {id} started with timings the messages cannot carry exactly (h {:?}, L {:?}, T {:?})",
                t.heartbeat, t.lease, t.election_timeout
            );
            self.violate(now, what);
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

    /// At the moment a message leaves: a granted vote and a candidacy are already on disk
    /// (rule 3); so is the term of every message but a pre-vote request or grant, which are for
    /// a term nobody has adopted yet (rule 2); so is every promise an ack or vote makes
    /// (rule 8); and a resign never leaves while the node still answers as leader (rule 9).
    pub fn on_send(
        &mut self,
        now: u64,
        node: usize,
        disk: &Persistent,
        answers_leader: bool,
        m: &Message,
    ) {
        let pre_vote = matches!(
            m.body,
            Body::Election { pre_vote: true, .. } | Body::Vote { pre_vote: true, .. }
        );
        if !pre_vote && m.term > disk.term {
            let what = format!(
                "{} sent a {} of term {} before the term was on disk ({disk:?})",
                m.from,
                m.body.kind(),
                m.term
            );
            self.violate(now, what);
        }
        if let Body::Ack {
            guard_ms: Some(g), ..
        }
        | Body::Vote {
            guard_ms: Some(g), ..
        } = &m.body
        {
            let promise = std::time::Duration::from_millis(*g);
            if disk.promised.is_none_or(|p| p < promise) {
                let what = format!(
                    "{} promised {promise:?} before that was on disk ({disk:?})",
                    m.from
                );
                self.violate(now, what);
            }
        }
        let on_disk = |who: &str| disk.term == m.term && disk.voted_for.as_deref() == Some(who);
        match &m.body {
            Body::Vote {
                candidate,
                granted: true,
                pre_vote: false,
                ..
            } if !on_disk(candidate) => {
                let what = format!(
                    "{} sent its vote for {candidate} in term {} before it was on disk ({disk:?})",
                    m.from, m.term
                );
                self.violate(now, what);
            }
            Body::Election {
                pre_vote: false, ..
            } if !on_disk(&m.from) => {
                let what = format!(
                    "{} asked for votes in term {} before its own vote was on disk ({disk:?})",
                    m.from, m.term
                );
                self.violate(now, what);
            }
            Body::Resign { .. } if answers_leader => {
                let what = format!(
                    "node {node} ({}) sent resign in term {} while its API still answered leader",
                    m.from, m.term
                );
                self.violate(now, what);
            }
            _ => {}
        }
    }

    /// A node's term never falls below what it persisted (a term it adopted but had not yet
    /// written may be lost to a crash: nobody relied on it); a leader's term is on disk, so the
    /// fencing token never goes back; at most one leader per term.
    pub fn on_view(
        &mut self,
        now: u64,
        node: usize,
        config: &Config,
        disk: &Persistent,
        view: &View,
    ) {
        self.max_term[node] = self.max_term[node].max(disk.term);
        if view.term < self.max_term[node] {
            self.violate(
                now,
                format!(
                    "{} went back from term {} (on disk) to {}",
                    config.node_id, self.max_term[node], view.term
                ),
            );
        }
        if view.role == Role::Leader {
            if disk.term != view.term {
                let what = format!(
                    "{} leads in term {} which is not on disk ({disk:?})",
                    config.node_id, view.term
                );
                self.violate(now, what);
            }
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

    /// Never two nodes answering as leader at the same true time.
    pub fn on_claims(&mut self, now: u64, claimants: &[String]) {
        match (self.claimless_since, claimants.is_empty()) {
            (None, true) => self.claimless_since = Some(now),
            (Some(since), false) => {
                self.claim_gaps.push((since, now));
                self.claimless_since = None;
            }
            _ => {}
        }
        if claimants.len() > 1 {
            self.violate(
                now,
                format!(
                    "{} nodes answer as leader at once: {:?}",
                    claimants.len(),
                    claimants
                ),
            );
        }
    }
}
