"""What the client returns: a leader as one member vouches for it, and a change of leader."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Optional


@dataclass(frozen=True)
class Leader:
    """The leader, as the member at ``answered_by`` vouched for it when it answered.

    - ``id``: the leader's node id; ``url``: where its API is reached (``None`` when the leader
      does not announce one, such as a member of an older build); ``meta``: its ``--meta``
      labels (read-only).
    - ``term``: the term it leads in, the fencing token.
    - ``is_self``: whether the member that answered is the leader itself.
    - ``answered_by``: the URL of the member that answered (one of the client's member URLs).
    - ``last_heartbeat``: seconds since that member last heard the leader (``None`` on the
      leader itself, or when not known); ``lease_remaining``: seconds of lease left, only when
      the leader itself answered (``is_self``), else ``None``.
    - ``received_at``: ``time.monotonic()`` when the answer arrived; the two ages above were
      true then.
    """

    id: str
    url: Optional[str]
    meta: Mapping[str, str] = field(hash=False)
    term: int
    is_self: bool
    answered_by: str
    last_heartbeat: Optional[float]
    lease_remaining: Optional[float]
    received_at: float


@dataclass(frozen=True)
class LeaderChange:
    """One change of leader that :meth:`Client.watch` yields: ``leader`` leads in ``term``.

    - ``leader`` is ``None`` only with ``watch(include_leaderless=True)``: the member stopped
      knowing a leader (a lease ran out, a new election began in ``term``).
    - ``url``: the leader's URL when the event said it (``None`` for a member of an older build,
      and for changes learned from history, which does not keep URLs).
    - ``reported_by``: the node id of the member whose stream told it; ``answered_by``: the URL
      the client reached that member at.
    - ``missed``: ``True`` when the change was learned after a reconnection from the member's
      history (a ``snapshot`` event's ``missed`` entries) rather than as it happened;
      ``reason``, ``previous`` and ``at`` (RFC 3339, the member's wall clock) come from that
      history entry and are ``None`` otherwise.
    - ``received_at``: ``time.monotonic()`` when the client learned it.
    """

    term: int
    leader: Optional[str]
    url: Optional[str]
    reported_by: str
    answered_by: str
    missed: bool
    reason: Optional[str]
    previous: Optional[str]
    at: Optional[str]
    received_at: float

    @property
    def leader_url(self) -> Optional[str]:
        """``url`` under the name the Rust client and :class:`Observation` use."""
        return self.url

    @property
    def node(self) -> str:
        """``reported_by`` under the name the Rust client and :class:`Observation` use."""
        return self.reported_by

    @property
    def source(self) -> str:
        """How it was learned, as the Rust client's ``source`` says it: ``"history"`` when
        ``missed``, ``"event"`` otherwise."""
        return "history" if self.missed else "event"


@dataclass(frozen=True)
class GroupChange:
    """A group's new leader, as :meth:`Client.watch_groups` yields it: ``leader`` leads
    ``group`` in ``term`` (the group's fencing token).

    - ``url``: the leader's URL as it announced it (``None`` when it announced none).
    - ``reported_by``: the node id of the member whose stream told it; ``answered_by``: the URL
      the client reached that member at.
    - ``received_at``: ``time.monotonic()`` when the client learned it.
    """

    group: str
    term: int
    leader: str
    url: Optional[str]
    reported_by: str
    answered_by: str
    received_at: float


@dataclass(frozen=True)
class GroupRemoved:
    """The member at ``answered_by`` no longer takes part in ``group`` (an operator removed it).
    If the group comes back, its leader is yielded again."""

    group: str
    answered_by: str


@dataclass(frozen=True)
class Observation:
    """A member's state as an observer heard it (:meth:`Client.observe`): who it says leads
    (``None`` during an election), its term, and when the data arrived.

    - ``leader``, ``leader_url``: the leader and the URL it announced (``None`` without a
      leader, or from an older build).
    - ``term``: the member's term.
    - ``node``: the id of the member that reported it.
    - ``answered_by``: the member URL (one of the client's) the stream was connected to.
    - ``heard_at``: ``time.monotonic()`` when the data arrived: the event, or for a repeat,
      the keep-alive.

    It vouches for nothing beyond what that member said then: not the leader's lease, and the
    leader may have changed since. :attr:`age` is how stale it is.
    """

    leader: Optional[str]
    leader_url: Optional[str]
    term: int
    node: str
    answered_by: str
    heard_at: float

    @property
    def age(self) -> float:
        """Seconds since the data arrived."""
        return time.monotonic() - self.heard_at
