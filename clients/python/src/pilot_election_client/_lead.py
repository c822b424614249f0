"""Running work only while one node leads, cancelled before its lease can run out."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Generic, Optional, TypeVar

T = TypeVar("T")

#: The work :meth:`Client.lead` runs: ``work(term, cancel_event)``.
WorkFn = Callable[[int, threading.Event], T]

#: The clock-rate drift the cluster's timings allow for (docs/protocol.md: r = 5 %).
DRIFT = 0.05


@dataclass(frozen=True)
class Tenure(Generic[T]):
    """One run of the work given to :meth:`Client.lead`.

    - ``term``: the term the node led in (the fencing token the work was given).
    - ``result``: what the work returned.
    - ``ended``: why the run ended: ``"returned"`` (the work returned while the node still led),
      ``"lost"`` (the node answered that it no longer leads in ``term``), ``"lease"`` (no renewed
      answer before the lease could run out: the node is unreachable, stuck or slow) or
      ``"stopped"`` (the ``stop`` event was set or the client was closed).
    - ``started_at``, ``cancelled_at``, ``ended_at``: ``time.monotonic()`` when the work
      started, when its cancel event was set (``None`` if it never was), when it returned.
    """

    term: int
    result: Optional[T]
    ended: str
    started_at: float
    cancelled_at: Optional[float]
    ended_at: float


def lease_end(sent_at: float, lease_remaining: float, margin: float) -> float:
    """The instant (``time.monotonic()``) by which the work must be cancelled.

    ``lease_remaining`` was measured by the node after ``sent_at``, so counting it from
    ``sent_at`` can only end early; dividing by ``1 + DRIFT`` covers a node whose clock runs
    fast against ours; ``margin`` leaves time for the work to see its cancel event.
    """
    return sent_at + lease_remaining / (1.0 + DRIFT) - margin


class _WorkThread(threading.Thread, Generic[T]):
    def __init__(self, target: "WorkFn[T]", term: int, cancel: threading.Event) -> None:
        super().__init__(name=f"pilot-election-lead-term-{term}", daemon=True)
        self._target = target
        self._term = term
        self._cancel = cancel
        self.result: Optional[T] = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.result = self._target(self._term, self._cancel)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            self.error = e
        finally:
            self.done.set()

