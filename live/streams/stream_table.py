"""The streams a hub knows: those the engine has not finished, and the last few
that ended, kept (with their replay buffers) for a late `GET`."""
from __future__ import annotations

import uuid
from collections import OrderedDict

from .stream import Stream, StreamExists, UnknownStream


class StreamTable:
    def __init__(self, keep_ended: int):
        self.keep_ended = keep_ended
        self._all: dict[str, Stream] = {}
        """Every stream a GET can still find."""
        self._running: dict[str, Stream] = {}
        """Streams the engine has not finished (some may have ended on this side)."""
        self._ended: OrderedDict[str, None] = OrderedDict()

    def open(self, prompt_tokens: int, stream_id: str | None) -> Stream:
        """A new stream, named `stream_id` if the client chose one."""
        if stream_id in self._all:
            raise StreamExists(stream_id)
        while stream_id is None or stream_id in self._all:  # a client may have taken it
            stream_id = uuid.uuid4().hex[:16]
        stream = Stream(stream_id, prompt_tokens)
        self._all[stream.id] = stream
        self._running[stream.id] = stream
        return stream

    def discard(self, stream: Stream) -> None:
        """Forget a stream as if it had never been opened."""
        self._all.pop(stream.id, None)
        self._running.pop(stream.id, None)

    def find(self, stream_id: str) -> Stream:
        stream = self._all.get(stream_id)
        if stream is None:
            raise UnknownStream(stream_id)
        return stream

    def running(self, stream_id: str) -> Stream | None:
        """The stream if the engine has not finished it."""
        return self._running.get(stream_id)

    def is_running(self, stream: Stream) -> bool:
        return stream.id in self._running

    def finished(self, stream_id: str) -> None:
        """The engine has finished it."""
        self._running.pop(stream_id, None)

    def ended(self, stream: Stream) -> None:
        """Keep it for late GETs, forgetting the oldest ended beyond `keep_ended`."""
        self._ended[stream.id] = None
        while len(self._ended) > self.keep_ended:
            self._all.pop(self._ended.popitem(last=False)[0], None)

    def running_streams(self) -> list[Stream]:
        return list(self._running.values())

    @property
    def any_running(self) -> bool:
        return bool(self._running)

    def counts(self) -> dict[str, int]:
        """What `/stats` reports of the streams."""
        return {
            "streams_open": sum(1 for s in self._running.values() if not s.ended),
            "streams_in_grace": sum(1 for s in self._running.values() if s.grace is not None),
            "readers": sum(len(s.readers) for s in self._all.values()),
            "queued_events": sum(s.unread for s in self._all.values()),
        }
