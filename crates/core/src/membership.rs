//! Who votes: the explicit member set, its quorum and its fingerprint (docs/protocol.md, rule 1).
//!
//! Safety rests on any two quorums sharing a node. That holds only among the nodes that agree
//! on who the members are, so the set is explicit (never inferred from who happens to talk), the
//! quorum follows from it, and every message carries a short fingerprint of the sender's set so
//! that votes and acknowledgements are only counted between nodes with the same set.

use std::collections::BTreeSet;
use std::fmt;

use sha2::{Digest, Sha256};

/// The voting members of a cluster, this node included. Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSet {
    ids: BTreeSet<String>,
    fingerprint: String,
}

/// The combined length of the member ids is bounded so that a message listing the members and
/// the members a node hears always fits in [`super::MAX_MESSAGE_BYTES`] with room to spare.
pub const MAX_MEMBER_ID_BYTES_TOTAL: usize = 4 * 1024;

/// Why a member set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// No ids at all: no quorum could exist.
    #[error("the member set is empty")]
    Empty,
    /// This id is empty or longer than [`super::MAX_ID_BYTES`]: it could not travel on the wire.
    #[error("member id {0:?} is empty or longer than 256 bytes")]
    BadId(String),
    /// This id is listed twice, most likely a configuration mistake.
    #[error("member {0:?} is listed twice")]
    Duplicate(String),
    /// Over [`MAX_MEMBER_ID_BYTES_TOTAL`]: an advert listing the members might not fit a message.
    #[error("the member ids together are longer than {MAX_MEMBER_ID_BYTES_TOTAL} bytes")]
    TooLarge,
}

impl MemberSet {
    /// Builds the set from ids; `self_id` is added when missing (a node is always a member of
    /// its own cluster).
    pub fn new<I, S>(self_id: &str, ids: I) -> Result<MemberSet, MembershipError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut set = BTreeSet::new();
        for id in ids {
            let id: String = id.into();
            if id.is_empty() || id.len() > super::MAX_ID_BYTES {
                return Err(MembershipError::BadId(id));
            }
            if !set.insert(id.clone()) {
                return Err(MembershipError::Duplicate(id));
            }
        }
        if self_id.is_empty() || self_id.len() > super::MAX_ID_BYTES {
            return Err(MembershipError::BadId(self_id.to_string()));
        }
        set.insert(self_id.to_string());
        if set.iter().map(String::len).sum::<usize>() > MAX_MEMBER_ID_BYTES_TOTAL {
            return Err(MembershipError::TooLarge);
        }
        Ok(MemberSet::from_set(set))
    }

    fn from_set(ids: BTreeSet<String>) -> MemberSet {
        let fingerprint = fingerprint_of(&ids);
        MemberSet { ids, fingerprint }
    }

    /// `N`.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Never true: a set always holds at least its own node.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// `Q = N/2 + 1`: the smallest number of members that any two such groups share one of.
    pub fn quorum(&self) -> usize {
        quorum_of(self.ids.len())
    }

    /// Whether `id` votes here; a non-member's messages change nothing, not even the term (rule 1).
    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// Sorted, as adverts list them in `member_ids` and as the fingerprint hashes them.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(String::as_str)
    }

    /// The ids that are in exactly one of the two sets.
    pub fn difference<'a>(&'a self, other: &'a BTreeSet<String>) -> Vec<&'a str> {
        self.ids
            .symmetric_difference(other)
            .map(String::as_str)
            .collect()
    }

    /// Eight hex digits naming exactly this set (SHA-256 of the sorted ids, one per line).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl fmt::Display for MemberSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.ids().collect();
        write!(f, "{{{}}} ({})", ids.join(", "), self.fingerprint)
    }
}

/// The quorum of `n` voting members: the one formula, used by the core and the transports.
pub fn quorum_of(n: usize) -> usize {
    n / 2 + 1
}

fn fingerprint_of(ids: &BTreeSet<String>) -> String {
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.as_bytes());
        h.update(b"\n");
    }
    h.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_itself_is_always_a_member_and_order_does_not_matter() {
        let a = MemberSet::new("a", ["b", "c"]).unwrap();
        let b = MemberSet::new("c", ["a", "b", "c"]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        assert_eq!(a.quorum(), 2);
        assert_eq!(a.fingerprint().len(), 8);
        assert_eq!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn any_other_set_has_another_fingerprint() {
        let three = MemberSet::new("a", ["b", "c"]).unwrap();
        let four = MemberSet::new("a", ["b", "c", "d"]).unwrap();
        let renamed = MemberSet::new("a", ["b", "e"]).unwrap();
        assert_ne!(three.fingerprint(), four.fingerprint());
        assert_ne!(three.fingerprint(), renamed.fingerprint());
        // Ids are separated, so "ab","c" and "a","bc" differ.
        let x = MemberSet::new("ab", ["c"]).unwrap();
        let y = MemberSet::new("a", ["bc"]).unwrap();
        assert_ne!(x.fingerprint(), y.fingerprint());
    }

    #[test]
    fn quorums_of_every_size() {
        let q: Vec<usize> = (1..=7).map(quorum_of).collect();
        assert_eq!(q, [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn bad_sets_are_refused() {
        assert_eq!(
            MemberSet::new("a", ["b", "b"]),
            Err(MembershipError::Duplicate("b".into()))
        );
        assert_eq!(
            MemberSet::new("a", [""]),
            Err(MembershipError::BadId("".into()))
        );
        let long: Vec<String> = (0..40).map(|i| format!("{i:0>250}")).collect();
        assert_eq!(MemberSet::new("a", long), Err(MembershipError::TooLarge));
    }

    /// The ids may total 4 KiB (`MAX_MEMBER_ID_BYTES_TOTAL`), the node's own id included, and
    /// not a byte more.
    #[test]
    fn member_ids_may_total_four_kib() {
        let ids: Vec<String> = (0..16).map(|i| format!("{i:0>256}")).collect();
        let full = MemberSet::new(&ids[0], ids.clone()).unwrap();
        assert_eq!(full.ids().map(str::len).sum::<usize>(), 4096);
        assert_eq!(full.len(), 16);
        assert_eq!(
            MemberSet::new("x", ids.clone()),
            Err(MembershipError::TooLarge)
        );
        let mut over = ids;
        over[15].pop();
        over.push("yz".into());
        assert_eq!(
            MemberSet::new("yz", over.clone()),
            Err(MembershipError::TooLarge)
        );
        over.pop();
        over.push("y".into());
        MemberSet::new("y", over).unwrap();
    }

    #[test]
    fn a_set_is_never_empty() {
        let alone = MemberSet::new("a", Vec::<String>::new()).unwrap();
        assert!(!alone.is_empty());
        assert_eq!(alone.len(), 1);
        assert!(!MemberSet::new("a", ["b", "c"]).unwrap().is_empty());
    }

    /// What logs and errors show of a set: its sorted ids and its fingerprint, the first eight
    /// hex digits of `printf 'a\nb\nc\n' | sha256sum`.
    #[test]
    fn a_set_shows_its_ids_and_fingerprint() {
        let set = MemberSet::new("c", ["b", "a"]).unwrap();
        assert_eq!(set.fingerprint(), "880553fc");
        assert_eq!(set.to_string(), "{a, b, c} (880553fc)");
    }
}
