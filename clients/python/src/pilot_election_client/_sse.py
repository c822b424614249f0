"""A parser of server-sent events (the WHATWG "event stream" format), fed arbitrary chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class SseEvent:
    """One dispatched event.

    ``id`` is the stream's last event id when the event was dispatched (it persists from an
    earlier event that set it, as the format says), ``None`` while no ``id:`` line was seen.
    """

    event: str
    data: str
    id: Optional[str]


class SseParser:
    """Turns the text of an event stream into events.

    Lines may end in CRLF, LF or CR, chunks may split lines (and CRLF pairs) anywhere; comments
    (``:...``) and unknown fields are ignored; ``data`` lines are joined with newlines; an ``id``
    containing NUL is ignored; ``retry`` (digits only) is kept in :attr:`retry_ms`. An event with
    no data is not dispatched (but its ``id`` still becomes the last event id).
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._skip_lf = False
        self._started = False
        self._event = ""
        self._data: List[str] = []
        self._has_data = False
        self.last_event_id: Optional[str] = None
        self.retry_ms: Optional[int] = None
        self.comments = 0
        """How many comment lines (a member's keep-alives) were read."""

    def feed(self, text: str) -> List[SseEvent]:
        """Parses ``text`` (the next piece of the stream) and returns the events it completed."""
        if not self._started and text:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        out: List[SseEvent] = []
        i = 0
        n = len(text)
        if self._skip_lf and n > 0:
            self._skip_lf = False
            if text[0] == "\n":
                i = 1
        while i < n:
            cr = text.find("\r", i)
            lf = text.find("\n", i)
            if cr < 0 and lf < 0:
                self._buffer += text[i:]
                break
            if cr < 0 or (0 <= lf < cr):
                end, nxt = lf, lf + 1
            else:
                end, nxt = cr, cr + 1
                if nxt < n:
                    if text[nxt] == "\n":
                        nxt += 1
                else:
                    self._skip_lf = True
            line = self._buffer + text[i:end]
            self._buffer = ""
            event = self._line(line)
            if event is not None:
                out.append(event)
            i = nxt
        return out

    def _line(self, line: str) -> Optional[SseEvent]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id":
            if "\x00" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value.isdigit() and value.isascii():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Optional[SseEvent]:
        event, data, has_data = self._event, self._data, self._has_data
        self._event, self._data, self._has_data = "", [], False
        if not has_data:
            return None
        return SseEvent(event=event or "message", data="\n".join(data), id=self.last_event_id)
