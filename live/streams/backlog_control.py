"""The backlog policy applied to live streams: each stream as its slowest reader
sees it is paused, resumed or dropped as the policy decides, and a timer finds the
stalls no event reveals. Under `naive` the step loop waits for the readers instead,
through the reader gate."""
from __future__ import annotations

import asyncio
import time
from typing import Callable

from scheduler import BacklogPolicy, Decision, FinishReason

from .reader_gate import ReaderGate
from .stream import Stream


class BacklogControl:
    def __init__(self, policy: BacklogPolicy, pause: Callable[[str], None],
                 resume: Callable[[str], None], close: Callable[[Stream, FinishReason], None]):
        """`pause` and `resume` reach the engine; `close` ends a dropped stream."""
        self.policy = policy
        self._pause = pause
        self._resume = resume
        self._close = close
        self._gate = ReaderGate() if policy.engine_waits else None
        self._dropped: set[Stream] = set()
        """Dropped streams whose readers still hold on."""
        self.readers_cut = 0

    def apply(self, stream: Stream, now: float) -> None:
        reader = stream.slowest()
        if stream.ended or reader is None:
            return
        decision = self.policy.decide(stream.backlog(reader), now)
        if decision is Decision.PAUSE:
            stream.policy_paused = True
            self.sync_pause(stream)
        elif decision is Decision.RESUME:
            stream.policy_paused = False
            self.sync_pause(stream)
        elif decision is Decision.DROP:
            stream.dropped_at = now
            self._dropped.add(stream)
            self._close(stream, FinishReason.SLOW_CLIENT)

    def sync_pause(self, stream: Stream) -> None:
        """The engine's pause follows the policy's and the resume grace's wishes."""
        want = not stream.ended and (stream.policy_paused or stream.left_at is not None)
        if want != stream.engine_paused:
            stream.engine_paused = want
            (self._pause if want else self._resume)(stream.id)

    def recount(self, stream: Stream) -> None:
        """Under `naive`, carry the stream's unwritten events into the gate's count."""
        if self._gate is None:
            return
        unread = stream.unread
        self._gate.add(unread - stream.counted)
        stream.counted = unread

    def reader_gone(self, stream: Stream) -> None:
        if not stream.readers:
            self._dropped.discard(stream)

    async def watch(self, interval: float, running: Callable[[], list[Stream]]) -> None:
        """Stalls end without any event arriving: look for them on a timer."""
        stall = self.policy.stall_timeout_s
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for stream in running():
                self.apply(stream, now)
            for stream in list(self._dropped):
                # a dropped stream's reader gets `stall` more to take its last events
                for reader in stream.readers:
                    if not reader.cut.is_set() and now - max(stream.dropped_at,
                                                             reader.last_read) > stall:
                        reader.cut.set()
                        self.readers_cut += 1

    # -- the naive gate, between the step thread and the loop ---------------------

    def wait_for_readers(self) -> None:
        """Before a step: under `naive`, until every delivered event is written."""
        if self._gate is not None:
            self._gate.wait()

    def in_flight(self, steps: int) -> None:
        """A step's output on its way to the loop (1), or taken there (-1)."""
        if self._gate is not None:
            self._gate.add(steps)

    def stop_waiting(self) -> None:
        """Never hold the step loop again (shutdown)."""
        if self._gate is not None:
            self._gate.open()

    @property
    def engine_waiting(self) -> bool:
        return self._gate is not None and self._gate.waiting
