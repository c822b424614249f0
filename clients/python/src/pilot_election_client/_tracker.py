"""Deduplication of leader changes across reconnections: each (term, leader) once, in term order."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, List, Mapping, Optional

from ._model import LeaderChange


class ChangeTracker:
    """Decides which of the changes a stream reports are new.

    The rules: a term lower than the highest yielded is dropped (terms only grow, so it is old
    news: a replayed or a lagging member's view); a leader already yielded for its term is
    dropped (one term has at most one leader). With ``include_leaderless``, a ``None`` leader
    is yielded once when a known leader goes away, at a term not lower than the last one, and a
    leader that comes back in its own term after that is yielded again.
    """

    def __init__(self, include_leaderless: bool = False) -> None:
        self.include_leaderless = include_leaderless
        self.term: Optional[int] = None
        """The highest term yielded so far."""
        self._leader_of_term: Optional[str] = None
        self._current: Optional[str] = None
        self._yielded_any = False

    def offer(self, change: LeaderChange) -> Optional[LeaderChange]:
        """``change`` if it is new (and records it), else ``None``."""
        if self.term is not None and change.term < self.term:
            return None
        if change.leader is None:
            if not self.include_leaderless or not self._yielded_any or self._current is None:
                return None
            if self.term is not None and change.term > self.term:
                self._leader_of_term = None
            self.term = change.term
            self._current = None
            return change
        if change.term == self.term and self._leader_of_term == change.leader:
            if self._current is None and self.include_leaderless:
                # The same leader again after a leaderless spell in its term.
                self._current = change.leader
                return change
            return None
        self.term = change.term
        self._leader_of_term = change.leader
        self._current = change.leader
        self._yielded_any = True
        return change

    def offer_all(self, changes: Iterable[LeaderChange]) -> List[LeaderChange]:
        """The new ones among ``changes``, offered in term order (stable for equal terms)."""
        out = []
        for c in sorted(changes, key=lambda c: c.term):
            new = self.offer(c)
            if new is not None:
                out.append(new)
        return out


def changes_of_snapshot(
    data: Mapping[str, Any], answered_by: str, received_at: float
) -> List[LeaderChange]:
    """The changes a ``snapshot`` event stands for: its ``missed`` history entries, oldest first,
    then its current state."""
    node = str(data.get("node", ""))
    history = changes_of_history(data.get("missed") or [], node, answered_by, received_at)
    return with_current(history, change_of_event(data, answered_by, received_at))


def with_current(history: List[LeaderChange], current: LeaderChange) -> List[LeaderChange]:
    """``history`` then ``current``, the current leader's URL copied into its history entries
    (history keeps no URLs)."""
    out = [
        replace(c, url=current.url)
        if (c.term, c.leader) == (current.term, current.leader) and c.url is None
        else c
        for c in history
    ]
    out.append(current)
    return out


def changes_of_history(
    entries: Iterable[Mapping[str, Any]], node: str, answered_by: str, received_at: float
) -> List[LeaderChange]:
    """The changes that ``/history`` entries ``{term, leader, previous, reason, at,
    leaderless_ms}`` record, in the order given."""
    out = []
    for e in entries:
        out.append(
            LeaderChange(
                term=_int(e.get("term")),
                leader=_opt_str(e.get("leader")),
                url=None,
                reported_by=node,
                answered_by=answered_by,
                missed=True,
                reason=_opt_str(e.get("reason")),
                previous=_opt_str(e.get("previous")),
                at=_opt_str(e.get("at")),
                received_at=received_at,
            )
        )
    return out


def change_of_event(
    data: Mapping[str, Any], answered_by: str, received_at: float
) -> LeaderChange:
    """The state a ``leader`` event (or a snapshot's current state) reports."""
    leader = _opt_str(data.get("leader"))
    return LeaderChange(
        term=_int(data.get("term")),
        leader=leader,
        url=_opt_str(data.get("leader_url")) if leader is not None else None,
        reported_by=str(data.get("node", "")),
        answered_by=answered_by,
        missed=False,
        reason=None,
        previous=None,
        at=None,
        received_at=received_at,
    )


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"not a term: {v!r}")
    return v


def _opt_str(v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"not a string: {v!r}")
    return v

