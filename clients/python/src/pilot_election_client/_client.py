"""The client: who leads (with failover between members), watching, leading."""

from __future__ import annotations

import codecs
import collections
import dataclasses
import http.client
import json
import random
import re
import socket
import ssl
import threading
import time
from typing import (
    Any,
    Deque,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Tuple,
    TypeVar,
    Union,
)
from types import MappingProxyType, TracebackType
from urllib.parse import quote, urlsplit

from ._errors import ProtocolError, Unavailable
from ._http import Connection, Member, Response, parse_member, request
from ._lead import Tenure, WorkFn, _WorkThread, lease_end
from ._model import GroupChange, GroupRemoved, Leader, LeaderChange, Observation
from ._sse import SseEvent, SseParser
from ._tracker import (
    ChangeTracker,
    change_of_event,
    changes_of_history,
    changes_of_snapshot,
    with_current,
)

#: The header that marks a ``GET /events`` stream as an observer's (docs/clients.md).
OBSERVER_HEADER = "X-Pilot-Election-Observer"

T = TypeVar("T")


_GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_group(group: object) -> str:
    """A group name as the nodes take it, or a :class:`ValueError` that says the rule."""
    if not isinstance(group, str) or not _GROUP.fullmatch(group):
        raise ValueError(
            f"group must be 1 to 128 ASCII letters, digits, '-', '_' and '.', starting with a "
            f"letter or a digit, got {group!r}"
        )
    return group


class Client:
    """A client of a pilot-election cluster, given the URLs of its members.

    Every call asks the member that answered last first, and fails over to the next one when a
    member does not answer: connection refused or reset, a timeout, or a 5xx other than ``503
    no_leader`` (which is an answer: that member knows no leader). A 4xx is an answer too, one
    that refuses the request: :class:`ProtocolError` is raised without asking another member
    (a wrong URL prefix is a configuration error to see, not to hide). A body that is not the
    API's counts as that member failing; every failure is named in the :class:`Unavailable`
    raised when no member answers.

    ``timeout`` (seconds) bounds each connection attempt and each read of one request.
    ``group`` follows the election of that group rather than the members' default group (a
    node takes part in many: ``--group``, ``POST /groups``): every request and watch goes to
    ``/groups/<group>/...``; build one client per group to follow several. The client is
    thread-safe; :meth:`close` (or ``with Client(...) as c:``) ends every watch and
    :meth:`lead` it started.
    """

    def __init__(
        self,
        member_urls: Union[str, Iterable[str]],
        timeout: float = 2.0,
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        group: Optional[str] = None,
        observer: Optional[str] = None,
    ) -> None:
        if isinstance(member_urls, str):
            urls: List[object] = [member_urls]
        else:
            try:
                urls = list(member_urls)
            except TypeError:
                raise ValueError(
                    f"member_urls must be a list of URLs such as ['http://10.0.0.1:7070'], "
                    f"got {member_urls!r}"
                ) from None
        if not urls:
            raise ValueError(
                "member_urls is empty: give the URL of at least one member "
                "(such as ['http://10.0.0.1:7070', 'http://10.0.0.2:7070'])"
            )
        members = [parse_member(u) for u in urls]
        self._roots = [m.prefix for m in members]
        if group is not None:
            suffix = "/groups/" + check_group(group)
            members = [dataclasses.replace(m, prefix=m.prefix + suffix) for m in members]
        self.group = group
        """The group this client follows (``None``: the members' default group)."""
        seen = set()
        for m in members:
            if m.url in seen:
                raise ValueError(f"member URL {m.url!r} is given twice")
            seen.add(m.url)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if observer is not None and (
            not isinstance(observer, str)
            or not 1 <= len(observer.encode("utf-8")) <= 256
            or any(not "!" <= ch <= "~" for ch in observer)
        ):
            raise ValueError(
                f"observer must be 1 to 256 visible ASCII characters ('!' to '~'), got {observer!r}"
            )
        self.observer = observer
        """The id this client's ``/events`` streams carry in ``X-Pilot-Election-Observer``
        (``None``: they are no observer's)."""
        self._members: Tuple[Member, ...] = tuple(members)
        self.timeout = float(timeout)
        self._ssl = ssl_context
        self._lock = threading.Lock()
        self._current = 0
        self._closed = threading.Event()
        self._watches: "set[Watch]" = set()

    # -- members -------------------------------------------------------------------------

    @property
    def members(self) -> Tuple[str, ...]:
        """The members' URLs, normalised (``http://host:port[/prefix]``)."""
        return tuple(m.url for m in self._members)

    @property
    def current(self) -> str:
        """The URL of the member that answered last (the first one asked next)."""
        with self._lock:
            return self._members[self._current].url

    def _order(self) -> List[int]:
        with self._lock:
            start = self._current
        n = len(self._members)
        return [(start + i) % n for i in range(n)]

    def _answered(self, index: int) -> None:
        with self._lock:
            self._current = index

    # -- GET /leader ---------------------------------------------------------------------

    def leader(self, consistent: bool = False) -> Optional[Leader]:
        """The leader, as the first member that answers vouches for it; ``None`` when that
        member knows no leader (``503 no_leader``: an election is under way, or no quorum).

        With ``consistent=True``, a consistent read (``GET /leader?consistent=true``,
        docs/clients.md): the leader itself answers, once a quorum acknowledged a heartbeat it
        sent after the request arrived, so the answer never names a leader that is already
        gone; a follower's ``307`` to the leader's announced URL is followed once. A member
        that cannot confirm within its ``T`` (``503 read_not_confirmed``) counts as
        unavailable and the next one is asked.

        Raises :class:`Unavailable` when no member answers, :class:`ProtocolError` on a 4xx.
        """
        attempts: List[Tuple[str, str]] = []
        for i in self._order():
            member = self._members[i]
            try:
                answer, _sent = self._leader_of(member, self.timeout, consistent)
            except _Failed as e:
                attempts.append((member.url, str(e)))
                continue
            self._answered(i)
            return answer
        raise Unavailable(attempts)

    def _leader_of(
        self, member: Member, timeout: float, consistent: bool = False
    ) -> Tuple[Optional[Leader], float]:
        """One ``GET /leader`` of one member, and the ``time.monotonic()`` it was sent at."""
        sent = time.monotonic()
        resp = self._request(member, "/leader?consistent=true" if consistent else "/leader", timeout)
        if consistent and resp.status == 307:
            # Asked of a member that does not lead: ask the leader where it says it is.
            location = resp.headers.get("location")
            if not location:
                raise _Failed(f"answered 307 without a Location: {_describe(resp)}")
            parts = urlsplit(location)
            try:
                leader = parse_member(f"{parts.scheme}://{parts.netloc}")
            except ValueError as e:
                raise _Failed(f"answered 307 to {location!r}, not a member URL: {e}") from None
            path = parts.path + ("?" + parts.query if parts.query else "")
            resp = self._request(leader, path, timeout)
        received = time.monotonic()
        if resp.status == 503 and resp.error_code() == "no_leader":
            return None, sent
        if 400 <= resp.status < 500:
            raise ProtocolError(member.url, f"refused the request: {_describe(resp)}", resp.status)
        if resp.status != 200:
            raise _Failed(_describe(resp))
        try:
            return _parse_leader(resp.json(), member.url, received), sent
        except (ValueError, KeyError, TypeError) as e:
            raise _Failed(f"not a leader answer ({e}): {resp.body[:200]!r}") from None

    def _request(self, member: Member, path: str, timeout: float) -> Response:
        try:
            return request(member, path, timeout, self._ssl)
        except (OSError, http.client.HTTPException) as e:
            raise _Failed(_describe_exc(e)) from None

    def history(self) -> List[LeaderChange]:
        """The recent transitions (``GET /history``) of the first member that answers, oldest
        first, as changes (``missed`` is ``True``: they are history)."""
        attempts: List[Tuple[str, str]] = []
        for i in self._order():
            member = self._members[i]
            try:
                resp = self._request(member, "/history", self.timeout)
                if 400 <= resp.status < 500:
                    raise ProtocolError(member.url, f"refused the request: {_describe(resp)}", resp.status)
                if resp.status != 200:
                    raise _Failed(_describe(resp))
                doc = resp.json()
                changes = changes_of_history(
                    doc["transitions"], str(doc["node"]), member.url, time.monotonic()
                )
            except _Failed as e:
                attempts.append((member.url, str(e)))
                continue
            except (ValueError, KeyError, TypeError) as e:
                attempts.append((member.url, f"not a history answer ({e})"))
                continue
            self._answered(i)
            return changes
        raise Unavailable(attempts)

    # -- GET /events ---------------------------------------------------------------------

    def watch(
        self,
        *,
        include_leaderless: bool = False,
        idle_timeout: float = 25.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 2.0,
    ) -> "Watch":
        """An iterator of leader changes (:class:`LeaderChange`), from ``GET /events``.

        The first change is the leader the stream starts with (if it knows one); then one per
        change. Each ``(term, leader)`` is yielded once, in term order, never a term lower than
        one yielded already, across reconnections: when a stream ends or fails the watch
        reconnects (at once to the next member, then with a backoff from ``backoff_initial``
        doubling to ``backoff_max`` seconds while none answers), sends the last event id in
        ``Last-Event-ID``, and turns a ``snapshot`` event's ``missed`` history into the changes
        it stands for. A member of an older build, which sends no event ids, is asked for its
        ``/history`` after a reconnection instead, to the same effect.

        ``idle_timeout``: a stream silent this long is dropped (the nodes send a keep-alive
        comment every 10 s). Stop it with :meth:`Watch.close` (from any thread) or ``with``;
        :meth:`Client.close` stops every watch.
        """
        if idle_timeout <= 0 or backoff_initial < 0 or backoff_max < backoff_initial:
            raise ValueError("idle_timeout must be positive and 0 <= backoff_initial <= backoff_max")
        w = Watch(self, include_leaderless, idle_timeout, backoff_initial, backoff_max)
        with self._lock:
            self._watches.add(w)
        return w

    def watch_groups(
        self,
        groups: Optional[Iterable[str]] = None,
        *,
        idle_timeout: float = 25.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 2.0,
    ) -> "GroupsWatch":
        """An iterator of the leader changes of many groups on one connection
        (``GET /events?groups=``): :class:`GroupChange` for a group's new leader, and
        :class:`GroupRemoved` when the member stops taking part in a group.

        ``groups``: the group names to follow (each must be one of every member's groups), or
        ``None`` for every group of the member, those added while the stream is open too. The
        groups are the cluster's, whatever ``group`` the client was made for.

        A member starts each stream with every group's current state, so after a reconnection
        (to the same member or the next, with the backoff of :meth:`watch`) a group's leader is
        yielded only if its term is above the last one yielded for it: each group's changes
        once, in rising term order. Changes made while no stream was open are not recovered one
        by one (each group's ``/history`` has them); the state after them is. Stretches without
        a leader are not yielded.
        """
        if idle_timeout <= 0 or backoff_initial < 0 or backoff_max < backoff_initial:
            raise ValueError("idle_timeout must be positive and 0 <= backoff_initial <= backoff_max")
        if groups is None:
            query = "all"
        else:
            if isinstance(groups, str):
                raise ValueError("groups must be a list of group names (or None for every group), not one string")
            names = [check_group(g) for g in groups]
            if not names:
                raise ValueError("groups is empty: name at least one group, or give None for every group")
            query = ",".join(names)
        w = GroupsWatch(self, query, idle_timeout, backoff_initial, backoff_max)
        with self._lock:
            self._watches.add(w)
        return w

    def observe(
        self,
        *,
        idle_timeout: float = 25.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 2.0,
    ) -> "Observe":
        """An iterator of :class:`Observation`: every state a member reports on ``GET
        /events``, for a process that follows the election without a vote and must know how
        fresh its knowledge is (make the client with ``observer="agent-17"`` to be listed as
        one; a member then sends a keep-alive every second).

        It yields the member's state at each ``leader`` event and the current state of a
        ``snapshot`` (not its ``missed`` history), states without a leader included; skips a
        term lower than the highest it has yielded (a member that is behind); and yields the
        last state again, with the time it was heard, at each keep-alive of the stream that
        delivered it. After a lost stream nothing is yielded until the new stream's first
        state. The connections are a :meth:`watch`'s (the same options, reconnection and
        failover). Stop it with :meth:`Observe.close` or ``with``.
        """
        if idle_timeout <= 0 or backoff_initial < 0 or backoff_max < backoff_initial:
            raise ValueError("idle_timeout must be positive and 0 <= backoff_initial <= backoff_max")
        o = Observe(self, idle_timeout, backoff_initial, backoff_max)
        with self._lock:
            self._watches.add(o._stream)
        return o

    # -- leading -------------------------------------------------------------------------

    def lead(
        self,
        work: WorkFn[object],
        *,
        node: Optional[str] = None,
        poll_interval: float = 0.2,
        margin: float = 0.1,
        start_delay: float = 0.0,
        stop: Optional[threading.Event] = None,
    ) -> None:
        """Runs ``work(term, cancel_event)`` whenever ``node`` leads, for as long as it leads,
        tenure after tenure, until ``stop`` is set or the client is closed (then it returns).
        As Rust's ``Client::lead``.

        Each tenure is one :meth:`lead_once` (the same arguments and guarantees). Once the work
        has returned, ``lead`` waits for leadership again; work that returned by itself while
        the node still leads is started again one ``poll_interval`` later, in the same term. An
        exception the work raises ends ``lead`` with it.
        """
        stopper = stop if stop is not None else threading.Event()
        while True:
            tenure = self.lead_once(
                work,
                node=node,
                poll_interval=poll_interval,
                margin=margin,
                start_delay=start_delay,
                stop=stopper,
            )
            if tenure is None or self._stopped(stopper):
                return
            if tenure.ended == "returned" and self._wait(stopper, poll_interval):
                return

    def lead_once(
        self,
        work: WorkFn[T],
        *,
        node: Optional[str] = None,
        poll_interval: float = 0.2,
        margin: float = 0.1,
        start_delay: float = 0.0,
        stop: Optional[threading.Event] = None,
    ) -> Optional[Tenure[T]]:
        """Waits until ``node`` leads, runs ``work(term, cancel_event)`` in a thread while it
        does, and returns once the work has returned: **one tenure per call**, it does not loop.

        ``node`` is the URL of the service's own node (its sidecar); it may be left out when
        the client was given one URL. Only that node is asked (``GET /leader``, every
        ``poll_interval`` seconds, more often when the lease is short): ``is_self`` is that
        node's judgement of itself, so there is no failover here.

        ``cancel_event`` is set when the node answers that it no longer leads in ``term``,
        and in any case before the lease can run out: the lease ends ``lease_remaining_ms``
        after the request that reported it *left* (less the 5 % clock drift the cluster allows
        for), and ``margin`` seconds before that, without a renewed answer, the work is
        cancelled. The work must then return promptly, and should fence what it writes with
        ``term`` (:class:`Fence`): the lease bounds when another node can lead, not when a
        write sent earlier arrives.

        A node that hands over on purpose (``POST /step-down``, SIGTERM) lets its successor
        lead within milliseconds, before this client's next poll. ``start_delay`` (seconds,
        set it to the cluster's lease ``L``) makes a new tenure wait that long after the node
        first says it leads before starting the work, so that the previous leader's client,
        bound by its own lease, has cancelled its work by then.

        Returns a :class:`Tenure` (the term, the work's result, why it ended), or ``None`` if
        ``stop`` was set (or the client closed) before the node led. An exception raised by the
        work is raised here, after the tenure ended. To run work on every tenure, use
        :meth:`lead`. As Rust's ``Client::lead_once``.
        """
        if node is None:
            if len(self._members) != 1:
                raise ValueError(
                    "lead() and lead_once() need node=<URL of this service's own node> when the client "
                    "has more than one member"
                )
            member = self._members[0]
        else:
            member = parse_member(node)
        if poll_interval <= 0 or margin < 0 or start_delay < 0:
            raise ValueError("poll_interval must be positive, margin and start_delay >= 0")
        stopper = stop if stop is not None else threading.Event()
        while True:
            lead = self._await_leading(member, poll_interval, margin, stopper)
            if lead is None:
                return None
            tenure = self._tenure(member, work, lead, poll_interval, margin, start_delay, stopper)
            if tenure is not None:
                return tenure

    def _stopped(self, stop: threading.Event) -> bool:
        return stop.is_set() or self._closed.is_set()

    def _wait(self, stop: threading.Event, seconds: float) -> bool:
        """Sleeps up to ``seconds``; whether stop was asked for."""
        end = time.monotonic() + max(0.0, seconds)
        while True:
            if self._stopped(stop):
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            stop.wait(min(left, 0.05))

    def _poll(
        self, member: Member, timeout: float
    ) -> Union[Tuple[Optional[Leader], float], _Failed]:
        try:
            return self._leader_of(member, max(0.01, min(self.timeout, timeout)))
        except _Failed as e:
            return e
        except ProtocolError as e:
            # Counts as no renewed answer: the lease deadline still cancels the work.
            return _Failed(str(e))

    def _await_leading(
        self, member: Member, poll_interval: float, margin: float, stop: threading.Event
    ) -> Optional[Tuple[int, float, float]]:
        """Polls until the node leads: its term, the lease end and when the answer was asked."""
        while not self._stopped(stop):
            answer = self._poll(member, self.timeout)
            if not isinstance(answer, _Failed):
                leader, sent = answer
                if leader is not None and leader.is_self and leader.lease_remaining is not None:
                    end = lease_end(sent, leader.lease_remaining, margin)
                    if end > time.monotonic():
                        return leader.term, end, sent
            if self._wait(stop, poll_interval):
                return None
        return None

    def _tenure(
        self,
        member: Member,
        work: WorkFn[T],
        lead: Tuple[int, float, float],
        poll_interval: float,
        margin: float,
        start_delay: float,
        stop: threading.Event,
    ) -> Optional[Tenure[T]]:
        """Supervises one term: ``None`` if the node stopped leading before the work started."""
        term, deadline, sent = lead
        first_seen = time.monotonic()
        # At least two polls before the lease would run out.
        next_poll = sent + min(poll_interval, max(0.0, deadline - sent) / 2)
        cancel = threading.Event()
        thread: Optional[_WorkThread[T]] = None
        started_at = 0.0
        cancelled_at: Optional[float] = None
        ended = ""
        while True:
            now = time.monotonic()
            if thread is not None and thread.done.is_set():
                ended = "returned"
                break
            if self._stopped(stop):
                ended = "stopped"
                break
            if now >= next_poll:
                answer = self._poll(member, deadline - now if thread is not None else self.timeout)
                now = time.monotonic()
                if not isinstance(answer, _Failed):
                    leader, sent = answer
                    if (
                        leader is None
                        or not leader.is_self
                        or leader.term != term
                        or leader.lease_remaining is None
                    ):
                        ended = "lost"
                        break
                    deadline = lease_end(sent, leader.lease_remaining, margin)
                    # At least two polls before the lease would run out.
                    next_poll = sent + min(poll_interval, max(0.0, deadline - sent) / 2)
                else:
                    next_poll = now + min(poll_interval, max(0.0, deadline - now) / 2)
            if now >= deadline:
                ended = "lease"
                break
            if thread is None and now >= first_seen + start_delay:
                thread = _WorkThread(work, term, cancel)
                started_at = time.monotonic()
                thread.start()
            wake = min(next_poll, deadline)
            if thread is None:
                wake = min(wake, first_seen + start_delay)
                stop.wait(max(0.0, min(wake - time.monotonic(), 0.05)))
            else:
                thread.done.wait(max(0.0, min(wake - time.monotonic(), 0.05)))
        if thread is None:
            return None
        if not thread.done.is_set():
            cancel.set()
            cancelled_at = time.monotonic()
        thread.join()
        if thread.error is not None:
            raise thread.error
        return Tenure(
            term=term,
            result=thread.result,
            ended=ended,
            started_at=started_at,
            cancelled_at=cancelled_at,
            ended_at=time.monotonic(),
        )

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Stops every watch of this client and every :meth:`lead` waiting or running."""
        self._closed.set()
        with self._lock:
            watches = list(self._watches)
        for w in watches:
            w.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[type],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _forget(self, w: "Watch") -> None:
        with self._lock:
            self._watches.discard(w)

    def __repr__(self) -> str:
        return f"Client({list(self.members)!r}, timeout={self.timeout})"


class Watch(Iterator[LeaderChange]):
    """The iterator :meth:`Client.watch` returns; see there. Thread-safe :meth:`close`."""

    def __init__(
        self,
        client: Client,
        include_leaderless: bool,
        idle_timeout: float,
        backoff_initial: float,
        backoff_max: float,
    ) -> None:
        self._client = client
        self._tracker = ChangeTracker(include_leaderless)
        self._idle_timeout = idle_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._conn: Optional[Connection] = None
        self._sock: Optional[socket.socket] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self._member: Optional[Member] = None
        self._parser = SseParser()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: Deque[LeaderChange] = collections.deque()
        self._index: Optional[int] = None
        self._delay = 0.0
        self._connections = 0
        self._sent_id: Optional[str] = None
        self._first_event = True
        self._got_event = False
        self.last_event_id: Optional[str] = None
        """The id of the last event received (sent as ``Last-Event-ID`` when reconnecting)."""
        self.reconnects = 0
        """How many times the watch connected again after its first stream."""

    @property
    def term(self) -> Optional[int]:
        """The highest term yielded so far."""
        return self._tracker.term

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> LeaderChange:
        while not self._pending:
            if not self._pump():
                raise StopIteration
        return self._pending.popleft()

    def _pump(self) -> bool:
        """One step of the stream: connects, or reads what has arrived and takes its events
        in. False once the watch is closed."""
        if self._closed.is_set() or self._client._closed.is_set():
            self.close()
            return False
        if self._resp is None:
            self._connect()
            return True
        try:
            chunk = self._resp.read1(65536)
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            chunk = b""
        if not chunk:
            self._drop()
            return True
        for event in self._parser.feed(self._decoder.decode(chunk)):
            self._on_event(event)
        return True

    def _connect(self) -> None:
        n = len(self._client._members)
        if self._index is None:
            self._index = self._client._order()[0]
        if self._delay > 0:
            jittered = self._delay * (0.5 + random.random() / 2)
            if self._closed.wait(jittered):
                return
        member = self._client._members[self._index]
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self._client.observer is not None:
            headers[OBSERVER_HEADER] = self._client.observer
        sent_id = self.last_event_id or None
        if sent_id is not None:
            headers["Last-Event-ID"] = sent_id
        conn = member.connect(self._client.timeout, self._client._ssl)
        with self._lock:
            if self._closed.is_set():
                return
            self._conn = conn
        try:
            conn.connect()
            with self._lock:
                # Kept apart: http.client forgets conn.sock when the answer says "close".
                self._sock = conn.sock
            if self._closed.is_set():
                raise _Failed("closed")
            conn.request("GET", self._path(member), headers=headers)
            resp = conn.getresponse()
            ctype = resp.getheader("Content-Type", "") or ""
            if resp.status != 200 or not ctype.startswith("text/event-stream"):
                resp.read(1 << 16)
                raise _Failed(f"HTTP {resp.status} {ctype}")
            if self._sock is not None:
                self._sock.settimeout(self._idle_timeout)
        except (OSError, http.client.HTTPException, _Failed):
            self._drop()
            self._index = (self._index + 1) % n
            self._delay = min(max(self._delay * 2, self._backoff_initial), self._backoff_max)
            return
        if self._connections > 0:
            self.reconnects += 1
        self._connections += 1
        self._member = member
        self._resp = resp
        self._parser = SseParser()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._sent_id = sent_id
        self._first_event = True
        self._got_event = False

    def _path(self, member: Member) -> str:
        """What the stream asks the member for."""
        return member.prefix + "/events"

    def _drop(self) -> None:
        """Closes the stream; the next one is asked of the next member, at once if this one
        delivered events (a node that stopped), else after the backoff."""
        with self._lock:
            conn, self._conn = self._conn, None
            sock, self._sock = self._sock, None
            self._resp = None
        _shutdown(conn, sock)
        if self._member is not None:
            self._member = None
            n = len(self._client._members)
            self._index = ((self._index or 0) + 1) % n
            if not self._got_event:
                # A member that accepts the stream and closes it at once: back off too.
                self._delay = min(max(self._delay * 2, self._backoff_initial), self._backoff_max)

    def _on_event(self, event: SseEvent) -> None:
        member = self._member
        if member is None:
            return
        if event.id:
            self.last_event_id = event.id
        if event.event not in ("leader", "snapshot"):
            return
        now = time.monotonic()
        try:
            data = json.loads(event.data)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            if event.event == "snapshot":
                changes = changes_of_snapshot(data, member.url, now)
            else:
                current = change_of_event(data, member.url, now)
                changes = [current]
                resumed = self._sent_id is not None and event.id is not None
                if self._first_event and self._connections > 1 and not resumed:
                    history = self._history_of(member, str(data.get("node", "")))
                    changes = with_current(history, current)
        except (ValueError, TypeError):
            return
        self._first_event = False
        self._heard()
        self._pending.extend(self._tracker.offer_all(changes))

    def _heard(self) -> None:
        """The stream delivered an event: the member answers (asked first next time) and the
        backoff starts over."""
        self._got_event = True
        self._delay = 0.0
        assert self._index is not None
        self._client._answered(self._index)

    def _history_of(self, member: Member, node: str) -> List[LeaderChange]:
        """After a reconnection that did not resume (a member of an older build): what the
        member's ``/history`` says happened, to learn what the stream left out."""
        try:
            resp = request(member, "/history", self._client.timeout, self._client._ssl)
            if resp.status != 200:
                return []
            doc = resp.json()
            return changes_of_history(doc["transitions"], node, member.url, time.monotonic())
        except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
            return []

    def close(self) -> None:
        """Stops the watch (from any thread): a blocked ``next()`` returns StopIteration."""
        self._closed.set()
        with self._lock:
            conn, sock = self._conn, self._sock
        _shutdown(conn, sock)
        self._client._forget(self)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(
        self,
        exc_type: Optional[type],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class _Observed(Watch):
    """A :class:`Watch`'s connections, turned into :class:`Observation`\ s."""

    def __init__(
        self,
        client: Client,
        out: Deque[Observation],
        idle_timeout: float,
        backoff_initial: float,
        backoff_max: float,
    ) -> None:
        super().__init__(client, True, idle_timeout, backoff_initial, backoff_max)
        self._out = out
        self._last: Optional[Observation] = None
        self._highest = -1

    def _connect(self) -> None:
        # Nothing is repeated from a stream that is gone.
        self._last = None
        super()._connect()

    def _pump(self) -> bool:
        before = (self._parser, self._parser.comments)
        going = super()._pump()
        keep_alive = self._parser is before[0] and self._parser.comments != before[1]
        if keep_alive and self._last is not None and self._member is not None:
            self._last = dataclasses.replace(self._last, heard_at=time.monotonic())
            self._out.append(self._last)
        return going

    def _on_event(self, event: SseEvent) -> None:
        member = self._member
        if member is None:
            return
        if event.id:
            self.last_event_id = event.id
        if event.event not in ("leader", "snapshot"):
            return
        try:
            data = json.loads(event.data)
            term = data["term"]
            if not isinstance(term, int) or isinstance(term, bool) or term < 0:
                raise ValueError("no term")
            leader = data.get("leader")
            url = data.get("leader_url")
            o = Observation(
                leader=leader if isinstance(leader, str) else None,
                leader_url=url if isinstance(url, str) else None,
                term=term,
                node=str(data.get("node", "")),
                answered_by=member.url,
                heard_at=time.monotonic(),
            )
        except (ValueError, TypeError, KeyError):
            return
        self._heard()
        if o.term < self._highest:
            return
        self._highest = o.term
        self._last = o
        self._out.append(o)


class Observe(Iterator[Observation]):
    """The iterator :meth:`Client.observe` returns; see there. Thread-safe :meth:`close`."""

    def __init__(
        self, client: Client, idle_timeout: float, backoff_initial: float, backoff_max: float
    ) -> None:
        self._out: Deque[Observation] = collections.deque()
        self._stream = _Observed(client, self._out, idle_timeout, backoff_initial, backoff_max)

    @property
    def term(self) -> Optional[int]:
        """The highest term yielded so far."""
        return None if self._stream._highest < 0 else self._stream._highest

    def __iter__(self) -> "Observe":
        return self

    def __next__(self) -> Observation:
        while not self._out:
            if not self._stream._pump():
                raise StopIteration
        return self._out.popleft()

    def close(self) -> None:
        """Stops it (from any thread): a blocked ``next()`` returns StopIteration."""
        self._stream.close()

    def __enter__(self) -> "Observe":
        return self

    def __exit__(
        self,
        exc_type: Optional[type],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()


class GroupsWatch(Watch):
    """The iterator :meth:`Client.watch_groups` returns; see there. Thread-safe :meth:`close`."""

    def __init__(
        self,
        client: Client,
        query: str,
        idle_timeout: float,
        backoff_initial: float,
        backoff_max: float,
    ) -> None:
        super().__init__(client, False, idle_timeout, backoff_initial, backoff_max)
        self._query = query
        self._terms: Dict[str, int] = {}
        self._group_pending: Deque[Union[GroupChange, GroupRemoved]] = collections.deque()

    def __iter__(self) -> "GroupsWatch":
        return self

    def __next__(self) -> Union[GroupChange, GroupRemoved]:  # type: ignore[override]
        while not self._group_pending:
            if not self._pump():
                raise StopIteration
        return self._group_pending.popleft()

    def _path(self, member: Member) -> str:
        assert self._index is not None
        root = self._client._roots[self._index]
        return root + "/events?groups=" + quote(self._query, safe=",")

    def _on_event(self, event: SseEvent) -> None:
        member = self._member
        if member is None or event.event not in ("leader", "removed"):
            return
        try:
            data = json.loads(event.data)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            group = str(data["group"])
            if event.event == "removed":
                self._terms.pop(group, None)
                self._group_pending.append(GroupRemoved(group=group, answered_by=member.url))
            else:
                leader = data.get("leader")
                term = int(data["term"])
                if leader is not None and term > self._terms.get(group, -1):
                    self._terms[group] = term
                    self._group_pending.append(
                        GroupChange(
                            group=group,
                            term=term,
                            leader=str(leader),
                            url=data.get("leader_url"),
                            reported_by=str(data.get("node", "")),
                            answered_by=member.url,
                            received_at=time.monotonic(),
                        )
                    )
        except (ValueError, TypeError, KeyError):
            return
        self._heard()


class _Failed(Exception):
    """A member did not answer (the reason is the message)."""


def _shutdown(conn: Optional[Connection], sock: Optional[socket.socket]) -> None:
    """Wakes a read blocked on the stream (shutdown) and closes it."""
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    if conn is not None:
        try:
            conn.close()
        except OSError:
            pass


def _describe(resp: Response) -> str:
    code = resp.error_code()
    return f"HTTP {resp.status}" + (f" {code}" if code else "")


def _describe_exc(e: BaseException) -> str:
    if isinstance(e, socket.timeout):
        return "timed out"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _parse_leader(doc: Any, answered_by: str, received_at: float) -> Leader:
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    leader = doc["leader"]
    term = doc["term"]
    is_self = doc["is_self"]
    if not isinstance(leader, str) or not leader:
        raise ValueError("leader")
    if not isinstance(term, int) or isinstance(term, bool) or term < 0:
        raise ValueError("term")
    if not isinstance(is_self, bool):
        raise ValueError("is_self")
    url = doc.get("leader_url")
    meta = doc.get("leader_meta") or {}
    if url is not None and not isinstance(url, str):
        raise ValueError("leader_url")
    if not isinstance(meta, dict):
        raise ValueError("leader_meta")
    return Leader(
        id=leader,
        url=url,
        meta=MappingProxyType({str(k): str(v) for k, v in meta.items()}),
        term=term,
        is_self=is_self,
        answered_by=answered_by,
        last_heartbeat=_seconds(doc.get("last_heartbeat_ms")),
        lease_remaining=_seconds(doc.get("lease_remaining_ms")),
        received_at=received_at,
    )


def _seconds(ms: Any) -> Optional[float]:
    if ms is None:
        return None
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms < 0:
        raise ValueError(f"not milliseconds: {ms!r}")
    return ms / 1000.0


__all__ = ["Client", "Watch"]
