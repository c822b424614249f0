"""The client against a real 3-node cluster of the binary (PILOT_ELECTION_BIN)."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
import urllib.request
from typing import Dict, List, Optional, Set, Tuple

import pytest

from pilot_election_client import (
    Client,
    Fence,
    GroupChange,
    GroupRemoved,
    LeaderChange,
    StaleTerm,
    Tenure,
    Unavailable,
    Watch,
)

from cluster import TOKEN, Cluster, Node, Proxy, get_json, post_json, wait_until


class Collector:
    """Runs a watch in a thread and keeps what it yields."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.changes: List[LeaderChange] = []
        self.lock = threading.Lock()
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for c in self.watch:
                with self.lock:
                    self.changes.append(c)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def keys(self) -> List[Tuple[int, Optional[str]]]:
        with self.lock:
            return [(c.term, c.leader) for c in self.changes]

    def has(self, key: Tuple[int, str]) -> bool:
        assert self.error is None, self.error
        return key in self.keys()

    def close(self) -> None:
        self.watch.close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "the watch did not stop"


def assert_in_order_once(keys: List[Tuple[int, Optional[str]]]) -> None:
    terms = [t for t, _ in keys]
    assert terms == sorted(set(terms)), f"not strictly in term order, or repeated: {keys}"


def assert_saw_every_change(cluster: Cluster, col: Collector, since: int) -> None:
    """What the watch yielded is exactly what the nodes' /history recorded since ``since``."""

    def same() -> bool:
        return set(col.keys()) == cluster.leader_changes(since)

    wait_until(f"the watch to yield every change the nodes recorded: {cluster.leader_changes(since)}", same)
    assert_in_order_once(col.keys())


def test_leader_fails_over_when_the_member_it_talks_to_is_killed(cluster: Cluster) -> None:
    leader, term = cluster.agreed_leader()
    f1, f2 = [n for n in cluster.nodes.values() if n.id != leader]
    order = [f1, cluster[leader], f2]
    client = Client([n.url for n in order], timeout=1.0)

    got = client.leader()
    assert got is not None
    assert (got.id, got.term, got.is_self, got.answered_by) == (leader, term, False, f1.url)
    assert got.last_heartbeat is not None and got.lease_remaining is None

    f1.kill()
    got = client.leader()
    assert got is not None and got.answered_by == cluster[leader].url and got.is_self
    assert got.lease_remaining is not None and 0 < got.lease_remaining <= 0.4
    assert client.current == cluster[leader].url

    # Alone, f2 has no quorum: it answers 503 no_leader, which is an answer (None), not a failure.
    cluster[leader].kill()
    wait_until("f2 alone to know no leader", lambda: client.leader() is None)
    assert client.current == f2.url

    f2.kill()
    with pytest.raises(Unavailable) as e:
        client.leader()
    assert [u for u, _ in e.value.attempts] == [f2.url, f1.url, cluster[leader].url]


def test_watch_across_a_kill_of_the_leader_misses_no_change(
    cluster: Cluster, proxies: List[Proxy]
) -> None:
    leader, t0 = cluster.agreed_leader()
    others = [n for n in cluster.nodes.values() if n.id != leader]
    by_id: Dict[str, Proxy] = {n.id: Proxy(n.port) for n in cluster.nodes.values()}
    proxies.extend(by_id.values())
    client = Client([by_id[leader].url] + [by_id[n.id].url for n in others], timeout=1.0)
    col = Collector(client.watch(backoff_initial=0.05, backoff_max=0.3))
    try:
        wait_until("the watch's first change", lambda: col.has((t0, leader)))
        # The watch may only reach the others after the failover: what it learns then, it
        # learns from their snapshot (or history), not from the live stream.
        for n in others:
            by_id[n.id].cut()
        cluster[leader].kill()
        new, t1 = wait_until("a new leader", lambda: _new_leader(cluster, t0))
        assert new != leader
        for n in others:
            by_id[n.id].mend()
        wait_until(f"the watch to yield ({t1}, {new})", lambda: col.has((t1, new)))
        missed = [c for c in col.changes if c.term == t1]
        assert missed[0].missed, "learned from the snapshot after reconnecting"

        cluster[leader].start()
        wait_until("the restarted node to follow", lambda: (cluster[leader].leader() or {}).get("term", -1) >= t1)
        # One more change, seen live.
        current, t = cluster.agreed_leader()
        wait_until("a step-down", lambda: _try_step_down(cluster, current))
        l2, t2 = wait_until("a new leader", lambda: _new_leader(cluster, t))
        wait_until(f"the watch to yield ({t2}, {l2})", lambda: col.has((t2, l2)))
        assert_saw_every_change(cluster, col, t0)
        assert col.watch.reconnects >= 1
    finally:
        col.close()


def test_watch_across_a_restart_of_the_watched_node_misses_no_change(
    cluster: Cluster, proxies: List[Proxy]
) -> None:
    leader, t0 = cluster.agreed_leader()
    watched, other = [n for n in cluster.nodes.values() if n.id != leader]
    pw, po = Proxy(watched.port), Proxy(other.port)
    proxies.extend([pw, po])
    client = Client([pw.url, po.url], timeout=1.0)
    col = Collector(client.watch(backoff_initial=0.05, backoff_max=0.3))
    try:
        wait_until("the watch's first change", lambda: col.has((t0, leader)))
        po.cut()  # the watch can only come back through the watched node,
        pw.cut()  # and only once it has restarted and learned the new leader
        watched.kill()
        wait_until("a handover to the other follower", lambda: _try_step_down(cluster, leader, other.id))
        new, t1 = wait_until("the new leader", lambda: _new_leader(cluster, t0))
        assert new == other.id
        watched.start()
        wait_until("the restarted node to follow", lambda: (watched.leader() or {}).get("term", -1) >= t1)
        assert not col.has((t1, new))
        pw.mend()
        wait_until(
            f"the watch to yield ({t1}, {new}) through the restarted node", lambda: col.has((t1, new))
        )
        c = [c for c in col.changes if c.term == t1][0]
        assert c.missed and c.answered_by == pw.url, c
        po.mend()
        # One more change, seen live.
        wait_until("a step-down", lambda: _try_step_down(cluster, new))
        l2, t2 = wait_until("a new leader", lambda: _new_leader(cluster, t1))
        wait_until(f"the watch to yield ({t2}, {l2})", lambda: col.has((t2, l2)))
        assert_saw_every_change(cluster, col, t0)
    finally:
        col.close()


def _try_step_down(cluster: Cluster, leader: str, successor: Optional[str] = None) -> bool:
    try:
        cluster.step_down(leader, successor)
        return True
    except AssertionError:
        return False


def _new_leader(cluster: Cluster, above: int) -> Optional[Tuple[str, int]]:
    got = cluster.agreed_leader()
    return got if got[1] > above else None


def _wall(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def test_lead_cancels_its_work_before_another_node_leads(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    root.mkdir()
    cluster = Cluster(root, extra={"c": ["--no-candidate"]})
    cluster.start()
    markers = tmp_path / "running"
    markers.mkdir()
    lock = threading.Lock()
    runs: List[Dict[str, object]] = []  # one per work run: node, term, start, end (wall clock)
    violations: List[str] = []
    tenures: List[Tuple[str, Tenure[int]]] = []
    fence = Fence()
    stop = threading.Event()

    def work_of(node: str):  # type: ignore[no-untyped-def]
        def work(term: int, cancel: threading.Event) -> int:
            import time

            marker = markers / node
            with lock:
                if list(markers.iterdir()):
                    violations.append(f"{node} started in term {term} while {list(markers.iterdir())} ran")
                marker.write_text(str(term))
                run: Dict[str, object] = {"node": node, "term": term, "start": time.time()}
                runs.append(run)
            fence.check(term)  # the write of this tenure, fenced by its term
            while not cancel.wait(0.005):
                if len(list(markers.iterdir())) > 1:
                    violations.append(f"{node} in term {term} saw {list(markers.iterdir())}")
            with lock:
                marker.unlink()
                run["end"] = time.time()
            return term

        return work

    def leader_loop(node: Node) -> None:
        client = Client(node.url, timeout=0.5)
        while not stop.is_set():
            t = client.lead_once(work_of(node.id), poll_interval=0.05, margin=0.05, start_delay=0.4, stop=stop)
            if t is not None:
                with lock:
                    tenures.append((node.id, t))

    sampled_max = [0]

    def sampler() -> None:
        while not stop.is_set():
            sampled_max[0] = max(sampled_max[0], len(list(markers.iterdir())))
            stop.wait(0.005)

    threads = [threading.Thread(target=leader_loop, args=(cluster[n],), daemon=True) for n in ("a", "b")]
    threads.append(threading.Thread(target=sampler, daemon=True))
    for t in threads:
        t.start()
    try:
        first = wait_until("a first tenure", lambda: runs[:1])[0]
        n1, t1 = str(first["node"]), int(first["term"])  # type: ignore[call-overload]
        n2 = "b" if n1 == "a" else "a"

        # kill -9 of the leading node: its client cannot hear it, cancels on the lease.
        cluster[n1].kill()
        second = wait_until(f"a tenure on {n2}", lambda: [r for r in runs if r["node"] == n2][:1])[0]
        t2 = int(second["term"])  # type: ignore[call-overload]
        assert t2 > t1
        elected = [e for e in cluster[n2].history() if e["term"] == t2 and e["leader"] == n2][0]
        assert float(first["end"]) < _wall(elected["at"]), (first, elected)  # type: ignore[arg-type]
        with pytest.raises(StaleTerm) as e:
            fence.check(t1)  # the deposed tenure's write is refused
        assert e.value.term == t1 and e.value.highest >= t2
        wait_until(f"{n1}'s tenure to have ended on the lease", lambda: [t for n, t in tenures if n == n1])
        assert [t for n, t in tenures if n == n1][0].ended == "lease"

        # A handover on purpose: the successor leads at once; its client waits start_delay.
        cluster[n1].start()
        wait_until(f"{n1} to follow again", lambda: (cluster[n1].leader() or {}).get("term", -1) >= t2)
        wait_until("the handover", lambda: _try_step_down(cluster, n2, n1))
        third = wait_until(f"a tenure on {n1} again", lambda: [r for r in runs if r["node"] == n1][1:2])[0]
        assert int(third["term"]) > t2  # type: ignore[call-overload]
        wait_until(f"{n2}'s tenure to have ended", lambda: [t for n, t in tenures if n == n2])
        assert [t for n, t in tenures if n == n2][0].ended == "lost"
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        cluster.stop()
    assert not any(t.is_alive() for t in threads)
    assert violations == []
    assert sampled_max[0] <= 1
    spans = sorted((float(r["start"]), float(r.get("end", 1e18)), r["node"]) for r in runs)  # type: ignore[arg-type]
    for (s1, e1, a), (s2, e2, b) in zip(spans, spans[1:]):
        assert e1 < s2, f"{a} ran until {e1}, {b} started at {s2}"
    assert len(runs) >= 3


def test_a_client_of_a_group_follows_that_groups_election(tmp_path: Path) -> None:
    """Each node is in the default group and in g2: a client given ``group`` reads that
    group's leader and watches its changes, while the default group's leader stays put."""
    extra = {n: ["--group", "g2"] for n in ("a", "b", "c")}
    cluster = Cluster(tmp_path, extra)
    cluster.start()
    try:
        default = cluster.agreed_leader()
        client = Client(cluster.urls, timeout=1.0, group="g2")
        assert client.group == "g2"

        def g2_leader() -> Optional[Tuple[str, int]]:
            got = client.leader()
            return (got.id, got.term) if got is not None else None

        leader, term = wait_until("g2 to elect", g2_leader)
        status, body = get_json(cluster[leader].url + "/groups/g2/leader")
        assert status == 200 and (body["leader"], body["term"]) == (leader, term), body

        col = Collector(client.watch())
        wait_until("the g2 watch to see its leader", lambda: col.has((term, leader)))
        status, body = post_json(cluster[leader].url + "/groups/g2/step-down", {})
        assert status == 202, body
        wait_until("the g2 watch to see a new leader", lambda: any(t > term for t, _ in col.keys()))
        col.close()
        assert cluster.agreed_leader() == default, "the default group moved with g2"
        with pytest.raises(ValueError, match="group must be"):
            Client(cluster.urls, group="a/b")
    finally:
        cluster.stop()


def test_watch_groups_follows_many_groups_on_one_stream_across_a_kill(tmp_path: Path) -> None:
    """Each node is in g1, g2 and g3 beside the default group: one ``watch_groups`` stream
    names every group's leader, follows a step-down and a kill -9 of the member it is
    connected to, yields each group's terms once and rising, and says when a group that an
    operator removes is gone."""
    extra = {n: ["--group", "g1", "--group", "g2", "--group", "g3"] for n in ("a", "b", "c")}
    cluster = Cluster(tmp_path, extra)
    cluster.start()
    try:

        def leaders() -> Optional[Dict[str, Tuple[str, int]]]:
            out: Dict[str, Tuple[str, int]] = {}
            for g in ("g1", "g2", "g3"):
                seen = set()
                for n in cluster.nodes.values():
                    if n.alive:
                        status, body = get_json(f"{n.url}/groups/{g}/leader")
                        if status != 200:
                            return None
                        seen.add((body["leader"], body["term"]))
                if len(seen) != 1:
                    return None
                out[g] = seen.pop()
            return out

        led = wait_until("every group to elect", leaders)
        # g4, added while the nodes run (the only kind an operator can remove).
        for n in cluster.nodes.values():
            status, body = post_json(n.url + "/groups", {"group": "g4"})
            assert status == 201, body
        client = Client(cluster.urls, timeout=1.0, group="g1")
        events: List[object] = []
        lock = threading.Lock()
        w = client.watch_groups(["g1", "g2", "g4"], idle_timeout=2.0, backoff_max=0.5)

        def run() -> None:
            for e in w:
                with lock:
                    events.append(e)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()

        def changes() -> List[Tuple[str, int, str]]:
            with lock:
                return [(e.group, e.term, e.leader) for e in events if isinstance(e, GroupChange)]

        for g in ("g1", "g2"):
            leader, term = led[g]
            wait_until(f"the stream to name {g}'s leader", lambda: (g, term, leader) in changes())
        assert not any(g == "g3" for g, _, _ in changes()), "g3 is not followed"

        # A step-down in g2, then a kill -9 of the member the stream is connected to.
        leader, term = led["g2"]
        status, body = post_json(cluster[leader].url + "/groups/g2/step-down", {})
        assert status == 202, body
        wait_until("a new g2 leader on the stream", lambda: any(g == "g2" and t > term for g, t, _ in changes()))
        connected = w._member
        assert connected is not None
        victim = next(n for n in cluster.nodes.values() if n.url == connected.url)
        victim.kill()
        after = wait_until("the survivors to agree on every group", leaders)
        for g in ("g1", "g2"):
            l2, t2 = after[g]
            wait_until(f"the stream to name {g}'s leader after the kill", lambda: (g, t2, l2) in changes())
        for g in ("g1", "g2"):
            terms = [t for s, t, _ in changes() if s == g]
            assert terms == sorted(set(terms)), f"{g}: terms not once and rising: {terms}"

        # g4 removed from the member the stream is on: `removed`.
        on = w._member
        assert on is not None
        req = urllib.request.Request(
            on.url + "/groups/g4", method="DELETE", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with urllib.request.urlopen(req, timeout=2.0) as resp:
            assert resp.status == 200
        wait_until(
            "the stream to say g4 was removed",
            lambda: any(isinstance(e, GroupRemoved) and e.group == "g4" for e in list(events)),
        )
        w.close()
        thread.join(10)
        assert not thread.is_alive(), "the stream did not stop"
        for bad in ([], "g1", ["a/b"]):
            with pytest.raises(ValueError):
                client.watch_groups(bad)
    finally:
        cluster.stop()


def test_observe_yields_every_state_and_repeats_it_at_each_keep_alive(cluster: Cluster) -> None:
    leader, term = cluster.agreed_leader()
    client = Client(cluster.urls, observer="agent-17")
    states = client.observe(idle_timeout=5.0)
    # Never blocks the run for good: the observation is closed after the deadline.
    guard = threading.Timer(60.0, states.close)
    guard.start()
    try:
        it = iter(states)
        first = next(it)
        assert (first.leader, first.term) == (leader, term)
        assert first.answered_by in cluster.urls and first.node
        # Observers get a keep-alive every second: the same state again, heard later.
        again = next(it)
        assert (again.leader, again.term, again.node) == (first.leader, first.term, first.node)
        assert again.heard_at > first.heard_at and again.age >= 0
        # The member lists the observer it streams to.
        _, status = get_json(first.answered_by + "/status")
        assert "agent-17" in str(status["observers"]), status["observers"]
        # The leader goes: states follow (leaderless ones included), never a lower term.
        cluster[leader].kill()
        seen = []
        for o in it:
            seen.append(o)
            if o.leader not in (None, leader) and o.term > term:
                break
        assert seen and seen[-1].leader not in (None, leader), seen
        assert all(o.term >= term for o in seen), seen
    finally:
        guard.cancel()
        states.close()
        client.close()


def test_an_observer_id_is_checked() -> None:
    for bad in ["", "a b", "é", "x" * 257]:
        with pytest.raises(ValueError, match="observer must be"):
            Client(["http://127.0.0.1:9"], observer=bad)
    assert Client(["http://127.0.0.1:9"], observer="agent-17").observer == "agent-17"
