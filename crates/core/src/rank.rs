//! The rank order (docs/protocol.md, rule 11): `(priority, id)` compared lexicographically, the
//! greater leads. Everyone with the same view picks the same node, and an operator can predict
//! the winner from the ids alone (the default priority is the `cksum` of the id).

use std::cmp::Ordering;

/// A member's place in the order. The one rank rule: the core, the API and the simulator all
/// compare through this type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rank<'a> {
    /// Compared first; by default the `cksum` of the id, so the winner is predictable.
    pub priority: u32,
    /// The tie-break; ids are unique in a member set, so the order is total.
    pub id: &'a str,
}

impl<'a> Rank<'a> {
    /// Borrows the id, so ranking a whole member set allocates nothing.
    pub fn new(priority: u32, id: &'a str) -> Rank<'a> {
        Rank { priority, id }
    }

    /// Strictly better: leads before `other`.
    pub fn outranks(&self, other: &Rank<'_>) -> bool {
        self.cmp_to(other) == Ordering::Greater
    }

    fn cmp_to(&self, other: &Rank<'_>) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| self.id.cmp(other.id))
    }
}

impl PartialOrd for Rank<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rank<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cmp_to(other)
    }
}

/// 1-based positions of `(priority, id)` pairs, best first (1 = would lead).
pub fn positions<'a>(all: impl IntoIterator<Item = Rank<'a>>) -> Vec<(Rank<'a>, usize)> {
    let mut v: Vec<Rank<'a>> = all.into_iter().collect();
    v.sort_by(|a, b| b.cmp(a));
    v.into_iter().enumerate().map(|(i, r)| (r, i + 1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_first_then_id() {
        assert!(Rank::new(2, "a").outranks(&Rank::new(1, "z")));
        assert!(Rank::new(1, "b").outranks(&Rank::new(1, "a")));
        assert!(!Rank::new(1, "a").outranks(&Rank::new(1, "a")));
        let p = positions([Rank::new(1, "a"), Rank::new(3, "c"), Rank::new(1, "b")]);
        let ids: Vec<(&str, usize)> = p.iter().map(|(r, i)| (r.id, *i)).collect();
        assert_eq!(ids, [("c", 1), ("b", 2), ("a", 3)]);
    }
}
