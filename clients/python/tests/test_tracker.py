"""Deduplication of the changes a watch learns, live and from snapshots."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from pilot_election_client import LeaderChange
from pilot_election_client._tracker import ChangeTracker
from pilot_election_client._tracker import change_of_event, changes_of_snapshot


def ch(term: int, leader: Optional[str], missed: bool = False) -> LeaderChange:
    return LeaderChange(term, leader, None, "a", "http://a", missed, None, None, None, 0.0)


def keys(changes: List[LeaderChange]) -> List[Tuple[int, Optional[str]]]:
    return [(c.term, c.leader) for c in changes]


def test_each_term_and_leader_once_in_term_order() -> None:
    t = ChangeTracker()
    got = []
    for c in [ch(1, "a"), ch(1, "a"), ch(2, None), ch(2, "b"), ch(1, "a"), ch(2, "b"), ch(4, "c")]:
        new = t.offer(c)
        if new is not None:
            got.append(new)
    assert keys(got) == [(1, "a"), (2, "b"), (4, "c")]
    assert t.term == 4


def test_a_snapshot_after_live_events_yields_only_what_was_missed() -> None:
    t = ChangeTracker()
    assert keys(t.offer_all([ch(3, "a")])) == [(3, "a")]
    snapshot: Dict[str, Any] = {
        "node": "b",
        "leader": "c",
        "leader_url": "http://c:7070",
        "term": 6,
        "role": "follower",
        "resumed": False,
        "missed": [
            {"term": 3, "leader": "a", "previous": None, "reason": "elected", "at": "t3", "leaderless_ms": 5},
            {"term": 4, "leader": None, "previous": "a", "reason": "leader_timeout", "at": "t4", "leaderless_ms": None},
            {"term": 4, "leader": "b", "previous": None, "reason": "elected", "at": "t4b", "leaderless_ms": 9},
            {"term": 6, "leader": "c", "previous": "b", "reason": "transfer", "at": "t6", "leaderless_ms": 1},
        ],
    }
    got = t.offer_all(changes_of_snapshot(snapshot, "http://b", 1.0))
    assert keys(got) == [(4, "b"), (6, "c")]
    assert got[0].missed and got[0].reason == "elected" and got[0].at == "t4b"
    # The snapshot's current state is the same change as its last history entry: yielded once,
    # from history (with its reason); the live event after it adds nothing.
    assert got[1].reason == "transfer" and got[1].url == "http://c:7070"
    live = change_of_event({"node": "b", "leader": "c", "leader_url": "http://c:7070", "term": 6, "role": "follower"}, "http://b", 2.0)
    assert t.offer(live) is None
    assert live.url == "http://c:7070"


def test_a_replayed_older_snapshot_yields_nothing() -> None:
    t = ChangeTracker()
    t.offer_all([ch(7, "c")])
    old = {"node": "a", "leader": "b", "term": 5, "role": "follower", "missed": [{"term": 5, "leader": "b", "previous": None, "reason": "elected", "at": "x", "leaderless_ms": 1}]}
    assert t.offer_all(changes_of_snapshot(old, "http://a", 0.0)) == []


def test_leaderless_changes_only_when_asked_for() -> None:
    seq = [ch(1, "a"), ch(1, None), ch(2, None), ch(2, "b"), ch(2, None), ch(2, "b"), ch(3, "b")]
    assert keys(ChangeTracker().offer_all(seq)) == [(1, "a"), (2, "b"), (3, "b")]
    got = ChangeTracker(include_leaderless=True).offer_all(seq)
    assert keys(got) == [(1, "a"), (1, None), (2, "b"), (2, None), (2, "b"), (3, "b")]


def test_no_leader_at_the_start_is_not_a_change() -> None:
    assert ChangeTracker(include_leaderless=True).offer(ch(0, None)) is None
