//! Rule 19: a scheduled firing runs at most once across the cluster (docs/protocol.md).
//!
//! A firing is one instant of an election's schedule (`run --schedule`), named by that instant
//! in unix seconds. Every member keeps the newest [`Firing`] record it has heard (on disk before
//! it sends it) and sends it on every message; a leader runs a firing only once a quorum of
//! members has acknowledged, in its own term, a record of that firing or a later one. A leader
//! of any later term was voted in by a quorum that shares a member with that one, whose vote
//! carried the record, so it sees the firing handled and never claims it again. The core's
//! state machine never reads this: the shell keeps a [`FiringBook`] per election, and the
//! simulator keeps one per node the same way.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a firing stands in the record that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FiringState {
    /// A leader took it and runs it once a quorum holds this.
    Claimed,
    /// It ran and exited 0.
    Ok,
    /// It ran and failed (a non-zero exit, a signal, or it could not start).
    Failed,
    /// No leader could take it within its grace.
    Missed,
    /// A leader claimed it and lost leadership (or died) before its outcome was known: it may
    /// have run, once.
    Interrupted,
}

impl FiringState {
    /// Whether the firing is over: no record of the same firing that is not over supersedes it.
    pub fn is_final(self) -> bool {
        self != FiringState::Claimed
    }
}

/// The newest firing a member knows of, sent on every message of its election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Firing {
    /// The firing's instant, unix seconds: its id.
    pub at: u64,
    /// Claimed, or how it ended.
    pub state: FiringState,
    /// The term of the leader that wrote it.
    pub term: u64,
    /// The member that wrote it.
    pub by: String,
    /// The exit code, for a firing that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// How many firings before this one, after the previous record's, nobody ran (reported
    /// missed by the writer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Firing {
    /// Whether this record supersedes `other`: a later firing; for the same one, an outcome
    /// over a claim, then the higher term, then the member whose id sorts after.
    pub fn supersedes(&self, other: &Firing) -> bool {
        (self.at, self.state.is_final(), self.term, &self.by)
            > (other.at, other.state.is_final(), other.term, &other.by)
    }
}

/// One election's firing records at one member: the newest it has heard, whether that one is
/// on its disk (only then is it sent), and which record each member's latest acknowledgement
/// in a term carried.
#[derive(Debug, Clone, Default)]
pub struct FiringBook {
    record: Option<Firing>,
    durable: bool,
    acks: BTreeMap<String, (u64, u64)>,
}

impl FiringBook {
    /// The book as the disk held it.
    pub fn from_disk(record: Option<Firing>) -> FiringBook {
        FiringBook {
            durable: record.is_some(),
            record,
            acks: BTreeMap::new(),
        }
    }

    /// The newest record known, sent or not.
    pub fn record(&self) -> Option<&Firing> {
        self.record.as_ref()
    }

    /// What this member's messages carry: the newest record, once it is on disk. A member that
    /// sent a record it could forget in a restart could vote without it afterwards.
    pub fn sent(&self) -> Option<&Firing> {
        self.record.as_ref().filter(|_| self.durable)
    }

    /// Whether `write` supersedes what this member knows: the caller keeps it on disk and then
    /// calls [`FiringBook::take`].
    pub fn is_news(&self, write: &Firing) -> bool {
        self.record.as_ref().is_none_or(|r| write.supersedes(r))
    }

    /// Takes `write` as the newest record (if it is), `durable` saying whether it reached the
    /// disk. One that did not is still obeyed (nothing at or before it is claimed) but not sent
    /// until a later one is kept.
    pub fn take(&mut self, write: Firing, durable: bool) {
        if self.is_news(&write) {
            self.record = Some(write);
            self.durable = durable;
        }
    }

    /// `from`'s acknowledgement in `term` carried `carried` (or nothing). Only acknowledgements
    /// count: a member acknowledges a term only before it votes in a later one, so whatever it
    /// holds then, its later votes carry.
    pub fn acked(&mut self, from: &str, term: u64, carried: Option<&Firing>) {
        match carried {
            Some(f) => {
                self.acks.insert(from.to_string(), (term, f.at));
            }
            None => {
                self.acks.remove(from);
            }
        }
    }

    /// Whether a leader may claim firing `at`: no record of it, or of a later one, is known.
    pub fn may_claim(&self, at: u64) -> bool {
        self.record.as_ref().is_none_or(|r| r.at < at)
    }

    /// The members that hold a record of firing `at` or a later one as acknowledged in `term`:
    /// this member first (if it sends such a record), then every other member of `members`.
    pub fn held_by<'a>(
        &self,
        me: &'a str,
        members: impl IntoIterator<Item = &'a str>,
        term: u64,
        at: u64,
    ) -> Vec<String> {
        let mine = self.sent().is_some_and(|r| r.at >= at);
        let others = members.into_iter().filter(|id| {
            *id != me
                && self
                    .acks
                    .get(*id)
                    .is_some_and(|&(t, acked)| t == term && acked >= at)
        });
        mine.then_some(me)
            .into_iter()
            .chain(others)
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn firing(at: u64, state: FiringState, term: u64, by: &str) -> Firing {
        Firing {
            at,
            state,
            term,
            by: by.into(),
            code: None,
            missed: 0,
        }
    }

    #[test]
    fn a_later_firing_then_an_outcome_then_a_higher_term_supersedes() {
        use FiringState::*;
        let claim = firing(10, Claimed, 3, "a");
        assert!(firing(11, Claimed, 1, "a").supersedes(&claim));
        assert!(!claim.supersedes(&firing(11, Claimed, 1, "a")));
        assert!(firing(10, Ok, 3, "a").supersedes(&claim));
        assert!(firing(10, Interrupted, 2, "a").supersedes(&claim));
        assert!(!claim.supersedes(&firing(10, Failed, 3, "a")));
        assert!(firing(10, Claimed, 4, "a").supersedes(&claim));
        assert!(firing(10, Claimed, 3, "b").supersedes(&claim));
        assert!(!claim.supersedes(&claim), "a record is no news to itself");
        for s in [Ok, Failed, Missed, Interrupted] {
            assert!(s.is_final());
        }
        assert!(!Claimed.is_final());
    }

    #[test]
    fn a_record_reads_back_as_written_and_leaves_out_what_is_empty() {
        let mut f = firing(10, FiringState::Missed, 3, "a");
        let plain = serde_json::to_string(&f).unwrap();
        assert_eq!(
            plain, r#"{"at":10,"state":"missed","term":3,"by":"a"}"#,
            "nothing empty on the wire"
        );
        f.missed = 4;
        f.code = Some(2);
        let full = serde_json::to_string(&f).unwrap();
        assert!(
            full.contains(r#""missed":4"#) && full.contains(r#""code":2"#),
            "{full}"
        );
        assert_eq!(serde_json::from_str::<Firing>(&full).unwrap(), f);
        assert_eq!(
            serde_json::from_str::<Firing>(&plain).unwrap(),
            firing(10, FiringState::Missed, 3, "a")
        );
    }

    #[test]
    fn only_a_kept_record_is_sent_and_every_known_one_holds_claims_back() {
        let mut book = FiringBook::from_disk(None);
        assert!(book.may_claim(1));
        assert_eq!(book.sent(), None);
        let c = firing(10, FiringState::Claimed, 3, "a");
        assert!(book.is_news(&c));
        book.take(c.clone(), false);
        assert_eq!(book.record(), Some(&c));
        assert_eq!(book.sent(), None, "not on disk: not sent");
        assert!(!book.may_claim(10) && !book.may_claim(9) && book.may_claim(11));
        // An older record changes nothing, kept or not.
        book.take(firing(9, FiringState::Ok, 5, "b"), true);
        assert_eq!((book.record(), book.sent()), (Some(&c), None));
        let done = firing(10, FiringState::Ok, 3, "a");
        book.take(done.clone(), true);
        assert_eq!(book.sent(), Some(&done));
        assert!(!book.is_news(&done));
        let kept = FiringBook::from_disk(Some(done.clone()));
        assert_eq!(kept.sent(), Some(&done));
    }

    #[test]
    fn holders_are_the_acks_of_this_term_that_carried_the_firing_or_a_later_one() {
        let mut book = FiringBook::from_disk(None);
        let members = ["a", "b", "c", "d", "e"];
        book.take(firing(10, FiringState::Claimed, 3, "a"), true);
        book.acked("b", 3, Some(&firing(10, FiringState::Claimed, 3, "a")));
        book.acked("c", 3, Some(&firing(11, FiringState::Ok, 3, "a")));
        book.acked("d", 2, Some(&firing(10, FiringState::Claimed, 3, "a")));
        book.acked("e", 3, Some(&firing(9, FiringState::Ok, 2, "a")));
        // "a" hears its own broadcast: counted once, as itself.
        book.acked("a", 3, Some(&firing(10, FiringState::Claimed, 3, "a")));
        assert_eq!(book.held_by("a", members, 3, 10), ["a", "b", "c"]);
        assert_eq!(book.held_by("a", members, 3, 11), ["c"]);
        assert_eq!(book.held_by("a", members, 2, 10), ["a", "d"]);
        // An ack without a record forgets the earlier one.
        book.acked("b", 3, None);
        assert_eq!(book.held_by("a", members, 3, 10), ["a", "c"]);
        // Not a member: never counted.
        book.acked("x", 3, Some(&firing(10, FiringState::Claimed, 3, "a")));
        assert_eq!(book.held_by("a", members, 3, 10), ["a", "c"]);
        // A record this member has not kept does not count for itself.
        let mut unkept = FiringBook::from_disk(None);
        unkept.take(firing(10, FiringState::Claimed, 3, "a"), false);
        assert!(unkept.held_by("a", members, 3, 10).is_empty());
    }
}
