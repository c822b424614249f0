"""The server's side of docs/clients.md as the client sees it: the leader's URL and metadata,
and resumption on the same node with Last-Event-ID (no snapshot, nothing twice)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, List

import pytest

from pilot_election_client import Client

from cluster import Cluster, Proxy, wait_until
from test_cluster import Collector, _new_leader, _try_step_down, assert_saw_every_change


@pytest.fixture
def labelled(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, extra={i: ["--meta", f"zone=z-{i}", "--meta", "rack=r1"] for i in "abc"})
    c.start()
    yield c
    c.stop()


def test_leader_url_and_meta(labelled: Cluster, proxies: List[Proxy]) -> None:
    leader, term = labelled.agreed_leader()
    follower = [n for n in labelled.nodes.values() if n.id != leader][0]
    got = Client([follower.url]).leader()
    assert got is not None and got.id == leader and got.term == term
    assert got.url == labelled[leader].url
    assert dict(got.meta) == {"zone": f"z-{leader}", "rack": "r1"}
    with Client([follower.url]).watch() as w:
        first = next(w)
    assert (first.term, first.leader, first.url) == (term, leader, labelled[leader].url)


def test_watch_resumes_on_the_same_node_with_last_event_id(
    cluster: Cluster, proxies: List[Proxy]
) -> None:
    leader, t0 = cluster.agreed_leader()
    watched = [n for n in cluster.nodes.values() if n.id != leader][0]
    pw = Proxy(watched.port)
    proxies.append(pw)
    col = Collector(Client([pw.url], timeout=1.0).watch(backoff_initial=0.05, backoff_max=0.3))
    try:
        wait_until("the watch's first change", lambda: col.has((t0, leader)))
        assert col.watch.last_event_id, "the node numbers its events"
        pw.cut()  # the stream breaks, the node stays up and sees the handover
        wait_until("a step-down", lambda: _try_step_down(cluster, leader))
        new, t1 = wait_until("a new leader", lambda: _new_leader(cluster, t0))
        wait_until("the watched node to know it", lambda: (watched.leader() or {}).get("term", -1) >= t1)
        pw.mend()
        wait_until(f"the watch to yield ({t1}, {new})", lambda: col.has((t1, new)))
        resumed = [c for c in col.changes if c.term == t1][0]
        assert not resumed.missed, "resumed from the node's log, not from a snapshot"
        assert col.watch.reconnects >= 1
        assert_saw_every_change(cluster, col, t0)
    finally:
        col.close()
