"""Fencing by term: the highest term seen, and the refusal of anything lower."""

from __future__ import annotations

import threading
from ._errors import StaleTerm


class Fence:
    """The highest term seen, kept thread-safely; :meth:`check` refuses a lower term.

    The term of a leader is a fencing token (docs/guide/for-services.md, "Using the term as a
    fencing token"): terms only grow, across restarts too, so a write from a deposed leader
    always carries a smaller term than its successor's. Attach the term the work was given by
    :meth:`Client.lead` to every write, and let whoever takes the writes refuse older terms.

    In one process (a resource guarded in memory)::

        fence = Fence()

        def apply(term: int, write: Write) -> None:
            fence.check(term)        # raises StaleTerm for a deposed leader's term
            do(write)

    :meth:`check` and the action must not be separated by another writer's :meth:`check`, so
    keep both under one lock (``with fence.lock: fence.check(term); do(write)``) when the
    action is not atomic by itself.

    In a SQL database, keep the fence in the row (or in a one-row table) and let the database
    compare, so that the check and the write are one atomic statement::

        cur.execute(
            "UPDATE jobs SET owner = %s, fence_term = %s"
            " WHERE id = %s AND fence_term <= %s",
            (me, term, job_id, term),
        )
        if cur.rowcount == 0:
            raise StaleTerm(term, highest=read_fence_term(job_id))

    With a key-value store that has compare-and-set (etcd, Redis ``WATCH``/``MULTI``, a
    DynamoDB condition ``fence_term <= :term``): read the stored term, refuse if it is higher
    than yours, and write ``(value, term)`` conditioned on the stored term being unchanged;
    retry on a conflict. :meth:`compare_and_set` is that recipe for a term held in memory.
    """

    def __init__(self, initial: int = 0) -> None:
        if initial < 0:
            raise ValueError(f"a term is never negative, got {initial}")
        self._highest = initial
        self.lock = threading.RLock()
        """Held by :meth:`check`, :meth:`observe` and :meth:`compare_and_set`; hold it around a
        check and the action it guards to make the pair atomic."""

    @property
    def highest(self) -> int:
        """The highest term seen so far."""
        with self.lock:
            return self._highest

    def check(self, term: int) -> int:
        """Accepts ``term`` if it is at least the highest seen (and records it), else raises.

        Returns the highest term seen after the call (``term`` when it was accepted).
        Raises :class:`StaleTerm`, which names both terms, for a lower term.
        """
        with self.lock:
            if term < self._highest:
                raise StaleTerm(term, self._highest)
            self._highest = term
            return term

    def observe(self, term: int) -> bool:
        """Records ``term`` if it is higher than the highest seen; never raises.

        Returns whether ``term`` is current (at least the highest seen).
        """
        with self.lock:
            if term < self._highest:
                return False
            self._highest = term
            return True

    def is_current(self, term: int) -> bool:
        """Whether ``term`` would pass :meth:`check` now (nothing is recorded)."""
        with self.lock:
            return term >= self._highest

    def compare_and_set(self, expected: int, term: int) -> bool:
        """Moves the fence from ``expected`` to ``term`` only if it is still at ``expected``.

        The in-memory form of a store's compare-and-set: ``False`` when another writer moved
        the fence since you read ``expected`` (read :attr:`highest` again and retry), or when
        ``term`` is lower than ``expected``.
        """
        with self.lock:
            if self._highest != expected or term < expected:
                return False
            self._highest = term
            return True

    def __repr__(self) -> str:
        return f"Fence(highest={self.highest})"

