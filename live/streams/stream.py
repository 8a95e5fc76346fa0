"""One request's stream on the asyncio side: its log of events, which is at once
its readers' queue and its `Last-Event-ID` replay buffer, and the readers that
follow it, each with a cursor into the log. One reader is the stream's owner (the
POST that opened it, or the GET that came while it had none): the backlog policy
judges the stream by it; the others are followers, each judged alone."""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable

from scheduler import Backlog, FinishReason

from .events import Done, Failure, HubEvent, Timing, wire_size


class UnknownStream(LookupError):
    """No stream with this id, or it was forgotten."""


class StreamExists(KeyError):
    """A stream with this id is open, or ended recently enough to be followed."""


class EventGone(LookupError):
    """The replay buffer no longer holds the events after the one asked for."""


class StreamOver(LookupError):
    """The stream has ended and its last event was the one asked after."""


class ReadersFull(Exception):
    """The stream has as many followers as it may have."""


def seq_id_of(stream_id: str, key: str | None) -> str:
    """The engine's id of the stream a key names `stream_id`: each key has ids of
    its own (neither a name nor an id holds a '/')."""
    return stream_id if key is None else f"{key}/{stream_id}"


class Stream:
    def __init__(self, stream_id: str, prompt_tokens: int, key: str | None = None):
        self.id = stream_id
        """Its id on the wire, which its key chose or was given."""
        self.key = key
        """The name of the client key that opened it; None on an open server."""
        self.seq_id = seq_id_of(stream_id, key)
        """Its id in the engine, unique across keys."""
        self.prompt_tokens = prompt_tokens
        self.arrival = time.time()
        self.admitted: float | None = None
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.completion_tokens = 0
        """Tokens the stream has carried."""
        # (event, monotonic time it was queued, bytes queued before it)
        self.log: deque[tuple[HubEvent, float, int]] = deque()
        self.base_seq = 0
        self.next_seq = 0
        self.bytes_total = 0
        self.readers: list[Reader] = []
        self.owner: Reader | None = None
        self.ended = False
        self.policy_paused = False
        self.engine_paused = False
        self.left_at: float | None = None
        """Monotonic time the last reader left, while nobody reads an unfinished stream."""
        self.left_unix: float | None = None
        """The same on the wall clock, for the request's record."""
        self.tokens_after_leave = 0
        self.grace: asyncio.TimerHandle | None = None
        self.ended_at: float | None = None
        """Monotonic time its last event was appended."""
        self.counted = 0
        """Unwritten events this stream holds in the naive gate's count."""

    def append(self, event: HubEvent, now: float | None = None) -> None:
        """`now`: the monotonic time it is queued, if the caller has it."""
        self.log.append((event, time.monotonic() if now is None else now, self.bytes_total))
        self.bytes_total += wire_size(event)
        self.next_seq += 1
        for reader in self.readers:
            reader.wake()

    def end(self, reason: FinishReason, completion_tokens: int, text: str, finished: float) -> None:
        """Append its last events (a `Failure` if the engine failed it, then `Done`)
        and mark it ended."""
        if reason is FinishReason.ERROR:
            self.append(Failure(self.next_seq, "the engine failed while generating this stream "
                                               "(see the server log)"))
        timing = Timing(self.arrival, self.admitted, self.first_token, finished)
        self.append(Done(self.next_seq, reason, self.prompt_tokens, completion_tokens, text, timing))
        self.ended = True
        self.ended_at = time.monotonic()
        self.stop_grace()

    def trim(self, replay_events: int) -> None:
        """Forget the events every reader has taken, beyond the last `replay_events`."""
        keep = self.next_seq - replay_events
        slowest = self.slowest()
        if slowest is not None:
            keep = min(keep, slowest.cursor)
        while self.base_seq < keep:
            self.log.popleft()
            self.base_seq += 1

    def stop_grace(self) -> None:
        """A reader came back, or the stream ended: no cancel when the grace runs out."""
        if self.grace is not None:
            self.grace.cancel()
            self.grace = None

    def event_at(self, seq: int) -> HubEvent | None:
        i = seq - self.base_seq
        return self.log[i][0] if 0 <= i < len(self.log) else None

    def add(self, reader: Reader) -> None:
        """A reader follows the stream: its owner if it has none."""
        self.readers.append(reader)
        if self.owner is None:
            self.owner = reader

    def remove(self, reader: Reader) -> None:
        self.readers.remove(reader)
        if reader is self.owner:
            self.owner = None

    def check_room(self, max_followers: int) -> None:
        """Raise `ReadersFull` if one more reader would be a follower beyond `max_followers`."""
        if self.owner is not None and len(self.followers()) >= max_followers:
            raise ReadersFull(f"stream {self.id} has {max_followers} followers already, "
                              "as many as it may have")

    def followers(self) -> list[Reader]:
        return [r for r in self.readers if r is not self.owner]

    def backlog(self, reader: Reader) -> Backlog:
        """What `reader` holds back, counted from where it joined: a reader that
        replays the stream's past is not behind for it. Paused only for the owner."""
        first = max(reader.cursor, reader.joined)
        paused = self.policy_paused and reader is self.owner
        if first == self.next_seq:
            return Backlog(0, 0, reader.last_read, paused)
        _, queued_at, bytes_before = self.log[first - self.base_seq]
        return Backlog(self.next_seq - first, self.bytes_total - bytes_before,
                       max(reader.last_read, queued_at), paused)

    def slowest(self) -> Reader | None:
        return min(self.readers, key=lambda r: r.cursor, default=None)

    @property
    def unread(self) -> int:
        """Events its slowest reader has not taken yet."""
        slowest = self.slowest()
        return self.next_seq - slowest.cursor if slowest is not None else 0

    @property
    def owner_unread(self) -> int:
        return self.next_seq - self.owner.cursor if self.owner is not None else 0


class Reader:
    """One client following a stream: `next` gives the event at its cursor (waiting
    for it), `ready` those after it already here, `ack` moves on once they are
    written, `detach` ends the reading.

    `on_ack(stream)` and `on_detach(reader, left)` tell whoever keeps the stream."""

    def __init__(self, stream: Stream, cursor: int, on_ack: Callable[[Stream], None],
                 on_detach: Callable[[Reader, bool], None]):
        self.stream = stream
        self.cursor = cursor
        self.joined = cursor
        self.last_read = time.monotonic()
        """When it last took an event (its write was done)."""
        self.last_moved = self.last_read
        """When its client last took bytes: an event written, or bytes of a pending
        write leaving the server (`measure`)."""
        self._unsent: Callable[[], int] | None = None
        self._held = 0
        self.cut = asyncio.Event()
        """Set when the hub gives up on this reader (it stalled after its stream
        ended, or fell behind as a follower)."""
        self._on_ack = on_ack
        self._on_detach = on_detach
        self._wake = asyncio.Event()
        self._attached = True

    async def next(self, timeout: float | None = None) -> HubEvent | None:
        """The next event, or None if none came within `timeout` seconds."""
        while (event := self.stream.event_at(self.cursor)) is None:
            self._wake.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancel that lands as the wake-up does, and the stream's writer then
            # never learns that its client left.
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                return None
        return event

    def ready(self):
        """The events from the cursor on that are here now, in order, without
        waiting or moving the cursor: what one write may carry."""
        log, first = self.stream.log, self.cursor - self.stream.base_seq
        for i in range(max(first, 0), len(log)):
            yield log[i][0]

    def ack(self, events: int = 1) -> None:
        """`events` from the cursor on are written."""
        self.cursor += events
        self.last_read = self.last_moved = time.monotonic()
        self._on_ack(self.stream)

    def measure(self, unsent: Callable[[], int] | None) -> None:
        """`unsent()`: the bytes of its response the server holds that its client
        has not taken. A write to a slow client can take longer than a stall
        timeout though the client reads all along: only the bytes moving show it."""
        self._unsent = unsent
        self._held = unsent() if unsent is not None else 0

    def moved(self, now: float) -> float:
        """When its client last took bytes, looking at `now` whether the bytes held
        for it went down since the last look (new writes only add to them, and
        each is followed by an `ack`)."""
        if self._unsent is not None:
            held = self._unsent()
            if held < self._held:
                self.last_moved = now
            self._held = held
        return self.last_moved

    def detach(self, left: bool) -> None:
        """`left`: the client went away (rather than reading to the end)."""
        if self._attached:
            self._attached = False
            self._on_detach(self, left)

    def wake(self) -> None:
        """An event was appended at or after the cursor."""
        self._wake.set()

    def abandon(self) -> None:
        """Its stream never existed (the engine refused it): `detach` does nothing."""
        self._attached = False
