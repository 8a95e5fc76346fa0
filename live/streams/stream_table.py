"""The streams a hub knows: those the engine has not finished, and the last few
that ended, kept (with their replay buffers) for a late `GET`."""
from __future__ import annotations

import uuid
from collections import OrderedDict

from .stream import Stream, StreamExists, UnknownStream, seq_id_of


class StreamTable:
    def __init__(self, keep_ended: int):
        self.keep_ended = keep_ended
        self._all: dict[str, Stream] = {}
        """Every stream a GET can still find."""
        self._running: dict[str, Stream] = {}
        """Streams the engine has not finished (some may have ended on this side)."""
        self._ended: OrderedDict[str, None] = OrderedDict()

    def open(self, prompt_tokens: int, stream_id: str | None, key: str | None) -> Stream:
        """A new stream of `key`, named `stream_id` if the client chose one."""
        if stream_id is not None and seq_id_of(stream_id, key) in self._all:
            raise StreamExists(stream_id)
        # a client may have taken the id drawn
        while stream_id is None or seq_id_of(stream_id, key) in self._all:
            stream_id = uuid.uuid4().hex[:16]
        stream = Stream(stream_id, prompt_tokens, key)
        self._all[stream.seq_id] = stream
        self._running[stream.seq_id] = stream
        return stream

    def discard(self, stream: Stream) -> None:
        """Forget a stream as if it had never been opened."""
        self._all.pop(stream.seq_id, None)
        self._running.pop(stream.seq_id, None)

    def find(self, stream_id: str, key: str | None) -> Stream:
        """The stream `key` named `stream_id`: another key's is unknown to it."""
        stream = self._all.get(seq_id_of(stream_id, key))
        if stream is None:
            raise UnknownStream(stream_id)
        return stream

    def running(self, seq_id: str) -> Stream | None:
        """The stream of the engine's `seq_id` if the engine has not finished it."""
        return self._running.get(seq_id)

    def is_running(self, stream: Stream) -> bool:
        return stream.seq_id in self._running

    def finished(self, seq_id: str) -> None:
        """The engine has finished it."""
        self._running.pop(seq_id, None)

    def ended(self, stream: Stream) -> None:
        """Keep it for late GETs, forgetting the oldest ended beyond `keep_ended`."""
        self._ended[stream.seq_id] = None
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
