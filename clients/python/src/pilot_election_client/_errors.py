"""The exceptions of the client."""

from __future__ import annotations

from typing import Sequence, Tuple


class PilotElectionError(Exception):
    """Base class of every error this package raises."""


class Unavailable(PilotElectionError):
    """No member answered (each refused, timed out or failed with a 5xx other than no_leader).

    ``attempts`` lists ``(member_url, reason)`` for every member asked, in order.
    """

    def __init__(self, attempts: Sequence[Tuple[str, str]]) -> None:
        self.attempts: Tuple[Tuple[str, str], ...] = tuple(attempts)
        detail = "; ".join(f"{url}: {why}" for url, why in self.attempts)
        super().__init__(f"no member of the cluster answered ({detail})")


class ProtocolError(PilotElectionError):
    """A member answered something this client does not understand (a 4xx, a malformed body)."""

    def __init__(self, member: str, message: str, status: int = 0) -> None:
        self.member = member
        self.status = status
        super().__init__(f"{member}: {message}")


class StaleTerm(PilotElectionError):
    """A term lower than the highest one a :class:`Fence` has seen: a deposed leader's write."""

    def __init__(self, term: int, highest: int) -> None:
        self.term = term
        self.highest = highest
        super().__init__(
            f"stale term {term}: a term {highest} has already been seen, so term {term}'s "
            f"leader was deposed and its write must be refused"
        )
