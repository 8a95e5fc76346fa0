"""An incremental parser for server-sent events, as the WHATWG HTML standard
defines the `text/event-stream` format: bytes go in as they arrive, split
anywhere, and whole events come out.

The rules kept here: UTF-8 with one leading BOM ignored; lines end with CRLF, LF
or CR (a CR at the end of one chunk and an LF at the start of the next are one
line end); a blank line dispatches the event; `data` lines join with LF; a field
without a colon has an empty value; one space after the colon is dropped; `id`
with a NUL is ignored and otherwise persists to later events; `retry` counts only
when it is all ASCII digits; an event with no data is not dispatched; unknown
fields are ignored. Comment lines (`:` first) are not events, but a client that
waits on an idle stream wants to see them, so they come out as `Comment`s.
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str
    """The `event` field, or "message" when the event named none."""
    data: str
    id: str | None
    """The last event id the stream has set, as an EventSource reports it."""
    retry: int | None
    """A reconnection time (ms) given in this event's own lines, if any."""


@dataclass(frozen=True, slots=True)
class Comment:
    """A comment line, such as a keep-alive."""

    text: str


class SSEParser:
    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._at_stream_start = True
        self._partial_line: list[str] = []
        self._after_cr = False
        """The last text ended with CR, so an LF that starts the next is not a new line."""
        self.last_event_id: str | None = None
        """Set when an event block ends (a blank line), not when its `id` line comes,
        so a stream cut off mid-event does not claim that event was received."""
        self._id_buffer: str | None = None
        self.retry_ms: int | None = None
        """The stream's reconnection time, as last set."""
        self._event_type = ""
        self._data: list[str] = []
        self._event_retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent | Comment]:
        """The events and comments completed by `chunk`, in stream order."""
        text = self._decoder.decode(chunk)
        if self._at_stream_start and text:
            self._at_stream_start = False
            text = text.removeprefix("\ufeff")
        out: list[SSEEvent | Comment] = []
        for line in self._lines(text):
            item = self._line(line)
            if item is not None:
                out.append(item)
        return out

    def _lines(self, text: str) -> list[str]:
        if not text:
            return []
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = text.endswith("\r")
        pieces = _LINE_END.split(text)
        if len(pieces) == 1:
            self._partial_line.append(text)
            return []
        # Only the new text is scanned: a long line arriving in many small chunks
        # is joined once, when its end comes.
        first = "".join(self._partial_line) + pieces[0]
        self._partial_line = [pieces[-1]] if pieces[-1] else []
        return [first, *pieces[1:-1]]

    def _line(self, line: str) -> SSEEvent | Comment | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return Comment(line[1:].removeprefix(" "))
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "event":
            self._event_type = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = self._event_retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        self.last_event_id = self._id_buffer
        data, event_type, retry = self._data, self._event_type, self._event_retry
        self._data, self._event_type, self._event_retry = [], "", None
        if not data:
            return None
        return SSEEvent(event_type or "message", "\n".join(data), self.last_event_id, retry)
