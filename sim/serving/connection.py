"""One request's event stream between the engine and its reader: the server-side
queue (what the backlog policy sees) and the connection's transport buffer (socket
send and receive buffers), which absorbs a slow reader's backlog first. Once the
stream is closed, what the reader still has to take tells whether it makes
progress (`stall_start`), as the live hub judges a reader it may cut."""
from __future__ import annotations

from collections import deque

from scheduler import Backlog, Event


class Connection:
    __slots__ = ("capacity", "queue", "queued_bytes", "buffer", "buffer_bytes",
                 "last_take", "last_read", "reading", "paused", "closed", "closed_at")

    def __init__(self, capacity: int, opened_s: float):
        self.capacity = capacity
        self.queue: deque[tuple[Event, int, float]] = deque()
        """Server side: (event, bytes, when it was queued)."""
        self.queued_bytes = 0
        self.buffer: deque[tuple[Event, int]] = deque()
        """In the connection: (event, bytes)."""
        self.buffer_bytes = 0
        self.last_take = opened_s
        """When an event last left the server queue for the connection."""
        self.last_read = opened_s
        """When the reader last took an event off the connection."""
        self.reading = False
        """The reader is taking the bytes of the event at the head (a byte-rate
        reader): it makes progress all along."""
        self.paused = False
        """The hub has asked the core to pause this sequence."""
        self.closed = False
        """The server sends nothing more: final event queued, dropped, or disconnected."""
        self.closed_at: float | None = None
        """When it closed: a reader has the stall timeout from then to make progress."""

    def put(self, event: Event, size: int, now: float) -> None:
        self.queue.append((event, size, now))
        self.queued_bytes += size
        self.pump(now)

    def pump(self, now: float) -> None:
        """Move events into the connection while they fit. An event larger than the
        whole buffer still goes when the buffer is empty, as a write larger than the
        socket buffer goes out while the reader reads."""
        queue, buffer = self.queue, self.buffer
        while queue:
            event, size, _ = queue[0]
            if buffer and self.buffer_bytes + size > self.capacity:
                return
            queue.popleft()
            self.queued_bytes -= size
            buffer.append((event, size))
            self.buffer_bytes += size
            self.last_take = now

    def take(self, now: float) -> Event:
        """The reader takes the next event from the connection."""
        event, size = self.buffer.popleft()
        self.buffer_bytes -= size
        self.last_read = now
        self.reading = False
        self.pump(now)
        return event

    def head_bytes(self) -> int:
        return self.buffer[0][1]

    def backlog(self) -> Backlog:
        queue = self.queue
        last = max(self.last_take, queue[0][2]) if queue else self.last_take
        return Backlog(len(queue), self.queued_bytes, last, self.paused)

    def close(self, now: float) -> None:
        """The server will send nothing more than what it has queued."""
        self.closed = True
        self.closed_at = now

    def stall_start(self, now: float) -> float | None:
        """Once closed: when the reader last made progress (`now` while it takes
        bytes), or when the stream closed if later; None when nothing is left for
        it to take."""
        if not self.buffer:
            return None
        if self.reading:
            return now
        return max(self.last_read, self.closed_at)

    def discard_queue(self) -> None:
        """The server gives up on what it has not sent yet."""
        self.queue.clear()
        self.queued_bytes = 0

    def drop(self) -> None:
        """The server drops the connection: nothing it held reaches the reader."""
        self.discard_queue()
        self.buffer.clear()
        self.buffer_bytes = 0
