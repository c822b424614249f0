"""The client against scripted members: URLs, failover, answers, the watch's reconnection."""

from __future__ import annotations

import socket
import threading
import time
from typing import Iterator, List, Optional, Tuple

import pytest

from pilot_election_client import Client, LeaderChange, ProtocolError, Unavailable

from fake import FakeMember, Request, leader_body


@pytest.fixture
def members() -> Iterator[List[FakeMember]]:
    ms = [FakeMember(), FakeMember(), FakeMember()]
    yield ms
    for m in ms:
        m.close()


def dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    "urls, words",
    [
        ([], "empty"),
        (["10.0.0.1:7070"], "http://"),
        (["ftp://x"], "http://"),
        (["http://"], "no host"),
        (["http://a:7070?x=1"], "query"),
        (["http://a:99999"], "bad member URL"),
        (["http://a:7070", "http://a:7070/"], "twice"),
        ([7070], "string"),
    ],
)
def test_bad_member_urls_are_refused_clearly(urls: List[object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Client(urls)  # type: ignore[arg-type]


def test_urls_are_normalised_and_a_single_string_is_one_member() -> None:
    assert Client("http://a").members == ("http://a:80",)
    assert Client(["https://[::1]:7070/pe/"]).members == ("https://[::1]:7070/pe",)
    with pytest.raises(ValueError):
        Client(["http://a"], timeout=0)


def test_a_group_prefixes_every_request_and_a_bad_one_is_refused(members: List[FakeMember]) -> None:
    members[0].routes["/groups/shard-1/leader"] = lambda r: r.reply(200, leader_body())
    c = Client([members[0].url], group="shard-1")
    assert c.members == (members[0].url,) and c.group == "shard-1"
    got = c.leader()
    assert got is not None and got.id == "b"
    for bad in ["", "a/b", "-a", "a b", "\u00fc", "a" * 129, 5]:
        with pytest.raises(ValueError, match="group must be"):
            Client([members[0].url], group=bad)  # type: ignore[arg-type]


def test_leader_parses_the_answer(members: List[FakeMember]) -> None:
    members[0].routes["/leader"] = lambda r: r.reply(200, leader_body())
    before = time.monotonic()
    got = Client([members[0].url]).leader()
    assert got is not None
    assert (got.id, got.term, got.is_self, got.url) == ("b", 4, False, "http://b:7070")
    assert dict(got.meta) == {"zone": "z1"}
    assert got.answered_by == members[0].url
    assert got.last_heartbeat == pytest.approx(0.042) and got.lease_remaining is None
    assert before <= got.received_at <= time.monotonic()


def test_fails_over_and_remembers_who_answered(members: List[FakeMember]) -> None:
    members[0].routes["/leader"] = lambda r: r.reply(500, '{"error":"internal","message":"x"}')
    members[1].routes["/leader"] = lambda r: r.reply(503, '{"error":"overloaded","message":"x"}')
    members[2].routes["/leader"] = lambda r: r.reply(200, leader_body(node="c"))
    c = Client([dead_url(), members[0].url, members[1].url, members[2].url], timeout=1)
    got = c.leader()
    assert got is not None and got.answered_by == members[2].url
    assert c.current == members[2].url
    n0 = len(members[0].seen)
    assert c.leader() is not None
    assert len(members[0].seen) == n0  # asked the one that answered last first


def test_no_leader_is_an_answer_not_a_failure(members: List[FakeMember]) -> None:
    members[0].routes["/leader"] = lambda r: r.reply(503, '{"error":"no_leader","message":"x","term":3}')
    members[1].routes["/leader"] = lambda r: r.reply(200, leader_body())
    c = Client([members[0].url, members[1].url])
    assert c.leader() is None
    assert members[1].seen == []


def test_unavailable_names_every_member(members: List[FakeMember]) -> None:
    dead = dead_url()
    members[0].routes["/leader"] = lambda r: r.reply(502, "bad gateway", "text/plain")
    with pytest.raises(Unavailable) as e:
        Client([dead, members[0].url], timeout=1).leader()
    assert [u for u, _ in e.value.attempts] == [dead + "", members[0].url]
    assert "refused" in str(e.value) and "502" in str(e.value)


def test_a_timeout_moves_to_the_next_member(members: List[FakeMember]) -> None:
    hang = threading.Event()
    members[0].routes["/leader"] = lambda r: (hang.wait(5), None)[1]
    members[1].routes["/leader"] = lambda r: r.reply(200, leader_body())
    start = time.monotonic()
    got = Client([members[0].url, members[1].url], timeout=0.3).leader()
    hang.set()
    assert got is not None and got.answered_by == members[1].url
    assert time.monotonic() - start < 3


def ev(kind: str, eid: str, term: int, leader: str, node: str = "a") -> str:
    return (
        f'event: {kind}\nid: {eid}\ndata: {{"node":"{node}","leader":"{leader}",'
        f'"leader_url":null,"term":{term},"role":"follower"}}\n\n'
    )


def test_watch_resumes_with_last_event_id_and_uses_the_snapshot(members: List[FakeMember]) -> None:
    first, second = members[0], members[1]
    gone = threading.Event()

    def stream_then_die(r: Request) -> None:
        r.stream()
        r.send(": hello\n\n" + ev("leader", "a-1", 3, "x") + ev("leader", "a-2", 4, "y"))
        gone.wait(5)  # then the connection closes: the member "died"

    def snapshot(r: Request) -> None:
        assert r.headers["Last-Event-ID"] == "a-2"
        r.stream()
        missed = (
            '[{"term":4,"leader":"y","previous":null,"reason":"elected","at":"t","leaderless_ms":1},'
            '{"term":5,"leader":"z","previous":"y","reason":"transfer","at":"t","leaderless_ms":2},'
            '{"term":6,"leader":"x","previous":"z","reason":"transfer","at":"t","leaderless_ms":2}]'
        )
        r.send(
            'event: snapshot\nid: b-9\ndata: {"node":"b","leader":"x","leader_url":"http://x",'
            f'"term":6,"role":"follower","resumed":false,"missed":{missed}}}\n\n'
            + ev("leader", "b-10", 6, "x", "b")
            + ev("leader", "b-11", 7, "y", "b")
        )
        time.sleep(5)

    first.routes["/events"] = stream_then_die
    second.routes["/events"] = snapshot
    got: List[LeaderChange] = []
    with Client([first.url, second.url], timeout=1).watch(backoff_initial=0.01) as w:
        for c in w:
            got.append(c)
            if len(got) == 2:
                gone.set()
            if c.term == 7:
                break
    assert [(c.term, c.leader) for c in got] == [(3, "x"), (4, "y"), (5, "z"), (6, "x"), (7, "y")]
    assert [c.missed for c in got] == [False, False, True, True, False]
    assert w.last_event_id == "b-11" and w.reconnects == 1


def test_watch_of_an_older_build_reads_history_after_a_reconnection(members: List[FakeMember]) -> None:
    m = members[0]
    calls = []

    def events(r: Request) -> None:
        calls.append(r.headers.get("Last-Event-ID"))
        r.stream()
        if len(calls) == 1:
            r.send('event: leader\ndata: {"node":"a","leader":"p","term":2,"role":"follower"}\n\n')
            return  # closes
        r.send('event: leader\ndata: {"node":"a","leader":"r","term":5,"role":"follower"}\n\n')
        time.sleep(5)

    m.routes["/events"] = events
    m.routes["/history"] = lambda r: r.reply(200, (
        '{"node":"a","transitions":['
        '{"term":2,"leader":"p","previous":null,"reason":"elected","at":"t","leaderless_ms":1},'
        '{"term":4,"leader":"q","previous":"p","reason":"transfer","at":"t","leaderless_ms":1},'
        '{"term":5,"leader":"r","previous":"q","reason":"transfer","at":"t","leaderless_ms":1}]}'
    ))
    got = []
    with Client([m.url]).watch(backoff_initial=0.01) as w:
        for c in w:
            got.append((c.term, c.leader))
            if c.term == 5:
                break
    assert got == [(2, "p"), (4, "q"), (5, "r")]
    assert calls == [None, None]  # no ids: nothing to send


def test_watch_close_from_another_thread_ends_a_blocked_iteration(members: List[FakeMember]) -> None:
    def quiet(r: Request) -> None:
        r.stream()
        r.send(ev("leader", "1", 1, "a"))
        time.sleep(10)

    members[0].routes["/events"] = quiet
    w = Client([members[0].url]).watch()
    assert next(w).term == 1
    threading.Timer(0.2, w.close).start()
    start = time.monotonic()
    with pytest.raises(StopIteration):
        next(w)
    assert time.monotonic() - start < 3


def test_client_close_stops_a_watch_that_cannot_connect() -> None:
    c = Client([dead_url()])
    w = c.watch(backoff_initial=0.05, backoff_max=0.1)
    threading.Timer(0.3, c.close).start()
    assert list(w) == []


def test_async_client_and_watch(members: List[FakeMember]) -> None:
    import asyncio

    from pilot_election_client.aio import AsyncClient

    def events(r: Request) -> None:
        r.stream()
        r.send(ev("leader", "1", 1, "a") + ev("leader", "2", 2, "b"))
        time.sleep(5)

    members[0].routes["/leader"] = lambda r: r.reply(200, leader_body())
    members[0].routes["/events"] = events

    async def main() -> List[Tuple[int, Optional[str]]]:
        async with AsyncClient([members[0].url]) as c:
            got = await c.leader()
            assert got is not None and got.id == "b"
            seen = []
            async with c.watch() as w:
                async for change in w:
                    seen.append((change.term, change.leader))
                    if change.term == 2:
                        break
            return seen

    assert asyncio.run(main()) == [(1, "a"), (2, "b")]


def test_async_observe_sends_the_observer_header_and_skips_a_lower_term(
    members: List[FakeMember],
) -> None:
    import asyncio

    from pilot_election_client.aio import AsyncClient

    headers: List[Optional[str]] = []

    def events(r: Request) -> None:
        headers.append(r.headers.get("X-Pilot-Election-Observer"))
        r.stream()
        r.send(ev("leader", "1", 2, "b") + ev("leader", "2", 1, "a") + ": keep-alive\n\n")
        time.sleep(5)

    members[0].routes["/events"] = events

    async def main() -> List[Tuple[int, Optional[str]]]:
        async with AsyncClient([members[0].url], observer="agent-17") as c:
            seen = []
            async with c.observe() as states:
                async for o in states:
                    seen.append((o.term, o.leader))
                    if len(seen) == 2:
                        break
            return seen

    # The term-1 state is skipped; the keep-alive repeats the term-2 one.
    assert asyncio.run(main()) == [(2, "b"), (2, "b")]
    assert headers == ["agent-17"]


def test_a_consistent_read_follows_a_followers_redirect_and_passes_over_the_unconfirmed(
    members: List[FakeMember],
) -> None:
    unconfirmed, follower, leader = members
    unconfirmed.routes["/leader"] = lambda r: r.reply(
        503, '{"error":"read_not_confirmed","message":"no quorum","term":4,"after_ms":3000}')
    to = leader.url + "/leader?consistent=true"
    follower.routes["/leader"] = lambda r: r.reply(
        307, '{"error":"ask_the_leader","message":"ask","leader":"b","term":4,"location":"%s"}' % to,
        headers={"Location": to})
    leader.routes["/leader"] = lambda r: r.reply(200, leader_body("b", 4, True, "b", 300))
    c = Client([unconfirmed.url, follower.url])
    got = c.leader(consistent=True)
    assert got is not None and (got.id, got.term, got.is_self) == ("b", 4, True)
    assert [r.path for r in leader.seen] == ["/leader?consistent=true"]
    assert [r.path for r in unconfirmed.seen] == ["/leader?consistent=true"]
    # a plain read asks for no confirmation, and a redirect without a Location fails over
    assert Client(leader.url).leader() is not None and leader.seen[-1].path == "/leader"
    follower.routes["/leader"] = lambda r: r.reply(307, '{"error":"ask_the_leader","message":"ask"}')
    with pytest.raises(Unavailable, match="without a Location"):
        Client(follower.url).leader(consistent=True)


def test_lead_cancels_when_the_node_says_it_no_longer_leads(members: List[FakeMember]) -> None:
    m = members[0]
    answers = iter([leader_body("a", 3, True, "a", 300)] * 4)

    def leader(r: Request) -> None:
        body = next(answers, None)
        if body is None:
            r.reply(503, '{"error":"no_leader","message":"x","term":3}')
        else:
            r.reply(200, body)

    m.routes["/leader"] = leader
    terms = []

    def work(term: int, cancel: threading.Event) -> str:
        terms.append(term)
        assert cancel.wait(5)
        return "done"

    t = Client(m.url).lead_once(work, poll_interval=0.02)
    assert t is not None and (t.term, t.result, t.ended) == (3, "done", "lost")
    assert terms == [3] and t.cancelled_at is not None


def test_lead_cancels_before_the_lease_runs_out_when_the_node_goes_silent(members: List[FakeMember]) -> None:
    m = members[0]
    silent = threading.Event()
    sent: List[float] = []

    def leader(r: Request) -> None:
        if silent.is_set():
            time.sleep(3)  # a frozen node: no answer
            return
        sent.append(time.monotonic())
        r.reply(200, leader_body("a", 7, True, "a", 300))

    m.routes["/leader"] = leader

    def work(term: int, cancel: threading.Event) -> None:
        silent.set()
        assert cancel.wait(5)

    t = Client(m.url, timeout=2).lead_once(work, poll_interval=0.02, margin=0.05)
    assert t is not None and t.ended == "lease" and t.cancelled_at is not None
    # the last answer was asked for at or after sent[-1] (server side), so the lease ran until
    # at least sent[-1] + 0.3: the work was cancelled before that, by the margin
    assert t.cancelled_at < sent[-1] + 0.3


def test_lead_returns_none_when_stopped_before_leading(members: List[FakeMember]) -> None:
    members[0].routes["/leader"] = lambda r: r.reply(200, leader_body("b", 2, False, "a"))
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    assert Client(members[0].url).lead_once(lambda term, cancel: None, stop=stop) is None


def test_lead_needs_the_node_when_given_several_members() -> None:
    with pytest.raises(ValueError, match="node="):
        Client(["http://a:1", "http://b:1"]).lead(lambda term, cancel: None)
    with pytest.raises(ValueError, match="node="):
        Client(["http://a:1", "http://b:1"]).lead_once(lambda term, cancel: None)


def test_a_change_answers_to_the_rust_clients_field_names_too() -> None:
    c = LeaderChange(term=3, leader="b", url="http://b:1", reported_by="a", answered_by="http://a:1",
                     missed=False, reason=None, previous=None, at=None, received_at=0.0)
    assert (c.leader_url, c.node, c.source) == ("http://b:1", "a", "event")
    h = LeaderChange(term=4, leader="c", url=None, reported_by="a", answered_by="http://a:1",
                     missed=True, reason="elected", previous="b", at="2026-12-01T17:20:02Z",
                     received_at=0.0)
    assert h.source == "history"


def test_lead_runs_the_work_again_in_every_tenure_until_stopped(members: List[FakeMember]) -> None:
    m = members[0]
    term = [3]
    m.routes["/leader"] = lambda r: r.reply(200, leader_body("a", term[0], True, "a", 3000))
    runs: List[int] = []
    stop = threading.Event()

    def work(t: int, cancel: threading.Event) -> None:
        runs.append(t)
        if len(runs) == 2:
            term[0] = 4  # a new tenure: the node led again in a later term
            assert cancel.wait(5)
        if len(runs) == 4:
            stop.set()

    Client(m.url).lead(work, poll_interval=0.02, stop=stop)
    # Returned by itself in term 3: started again in term 3; cancelled when term 4 came; then
    # term 4 until stopped.
    assert runs == [3, 3, 4, 4], runs


def test_a_4xx_is_an_answer_raised_without_failover(members: List[FakeMember]) -> None:
    members[1].routes["/leader"] = lambda r: r.reply(200, leader_body())
    c = Client([members[0].url, members[1].url])  # members[0] answers 404 not_found
    with pytest.raises(ProtocolError) as e:
        c.leader()
    assert e.value.status == 404 and e.value.member == members[0].url
    assert members[1].seen == []
