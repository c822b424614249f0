"""A client of pilot-election: who leads, watching changes of leader, running work only while
this service's node leads, and fencing writes by term.

See ``clients/python/README.md`` and the repository's ``docs/clients.md``.
"""

from ._client import Client, GroupsWatch, Observe, Watch
from ._errors import PilotElectionError, ProtocolError, StaleTerm, Unavailable
from ._fence import Fence
from ._lead import Tenure
from ._model import GroupChange, GroupRemoved, Leader, LeaderChange, Observation

__all__ = [
    "Client",
    "Fence",
    "GroupChange",
    "GroupRemoved",
    "GroupsWatch",
    "Leader",
    "LeaderChange",
    "Observation",
    "Observe",
    "PilotElectionError",
    "ProtocolError",
    "StaleTerm",
    "Tenure",
    "Unavailable",
    "Watch",
]

__version__ = "0.1.0"
