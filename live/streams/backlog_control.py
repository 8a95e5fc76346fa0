"""The backlog policy applied to live streams: each stream as its owner's reader
sees it is paused, resumed or dropped as the policy decides; a follower that the
policy would pause or drop for is cut instead, alone; and a timer finds the
stalls no event reveals. Under the policies with a stall timeout, that timer also
cuts the readers of an ended stream (done or dropped) whose clients make no
progress for the timeout, so that no writer waits for ever on a client that
stopped reading. A dropped stream's reader that still reads takes everything
queued before the drop, then `slow_client`: the drop frees the engine, not the
reader. Progress is bytes leaving the server, not whole events written, since one
big event can take longer than the timeout to reach a slow client that reads all
along. Under `naive` the step loop waits for the readers instead, through the
reader gate."""
from __future__ import annotations

import asyncio
import time
from typing import Callable

from scheduler import BacklogPolicy, Decision, FinishReason

from .reader_gate import ReaderGate
from .stream import Reader, Stream


class BacklogControl:
    def __init__(self, policy: BacklogPolicy, pause: Callable[[str], None],
                 resume: Callable[[str], None], close: Callable[[Stream, FinishReason], None]):
        """`pause` and `resume` reach the engine; `close` ends a dropped stream."""
        self.policy = policy
        self._pause = pause
        self._resume = resume
        self._close = close
        self._gate = ReaderGate() if policy.engine_waits else None
        self._ended: set[Stream] = set()
        """Ended streams whose readers still hold on."""
        self.readers_cut = 0

    def apply(self, stream: Stream, now: float) -> None:
        """The policy's decision for the stream, then its count in the naive gate."""
        self._decide(stream, now)
        self.recount(stream)

    def _decide(self, stream: Stream, now: float) -> None:
        if stream.ended:
            return
        for follower in stream.followers():
            # a stranger's slowness never costs the owner its stream
            if self.policy.decide(stream.backlog(follower), now) in (Decision.PAUSE,
                                                                       Decision.DROP):
                self._cut(follower)
        if stream.owner is None:
            return
        decision = self.policy.decide(stream.backlog(stream.owner), now)
        if decision is Decision.PAUSE:
            stream.policy_paused = True
            self.sync_pause(stream)
        elif decision is Decision.RESUME:
            stream.policy_paused = False
            self.sync_pause(stream)
        elif decision is Decision.DROP:
            self._close(stream, FinishReason.SLOW_CLIENT)

    def ended(self, stream: Stream) -> None:
        """Its last event is appended: its readers have the stall timeout from now,
        or from their client's last progress if later, to take what they hold."""
        if stream.readers:
            self._ended.add(stream)

    def sync_pause(self, stream: Stream) -> None:
        """The engine's pause follows the policy's and the resume grace's wishes."""
        want = not stream.ended and (stream.policy_paused or stream.left_at is not None)
        if want != stream.engine_paused:
            stream.engine_paused = want
            (self._pause if want else self._resume)(stream.seq_id)

    def recount(self, stream: Stream) -> None:
        """Under `naive`, carry the owner's unwritten events into the gate's count."""
        if self._gate is None:
            return
        unread = stream.owner_unread
        self._gate.add(unread - stream.counted)
        stream.counted = unread

    def reader_gone(self, stream: Stream) -> None:
        if not stream.readers:
            self._ended.discard(stream)
        elif stream.owner is None and stream.policy_paused:
            # its owner's backlog paused it, and nobody is left to resume it for
            stream.policy_paused = False
            self.sync_pause(stream)

    async def watch(self, interval: float, running: Callable[[], list[Stream]]) -> None:
        """Stalls end without any event arriving: look for them on a timer."""
        stall = self.policy.stall_timeout_s
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for stream in running():
                self.apply(stream, now)
            for stream in list(self._ended):
                for reader in stream.readers:
                    if now - max(stream.ended_at, reader.moved(now)) > stall:
                        self._cut(reader)

    def _cut(self, reader: Reader) -> None:
        """Give up on a reader: its response drops its connection."""
        if not reader.cut.is_set():
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

    def wait_again(self) -> None:
        """Hold the steps of an engine started in place of one that stopped."""
        if self._gate is not None:
            self._gate.shut()

    @property
    def engine_waiting(self) -> bool:
        return self._gate is not None and self._gate.waiting
