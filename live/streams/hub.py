"""The hub: the asyncio side of the step loop.

One `Stream` per request holds its events, `Start` … `Done`, in a log that is at
once the readers' queue and the `Last-Event-ID` replay buffer: it keeps every event
some reader has not yet taken, plus the last `replay_events`. Each reader (the POST
that started the stream, GETs that attached to it) keeps a cursor into the log.
The backlog policy is applied to each stream as its slowest reader sees it; the
step loop never waits for a reader except under `naive`. Every way a stream can end
— the engine finishing it, its last reader leaving, a drop, shutdown — goes through
one idempotent `_end`, and `close` also cancels it in the engine.

Only the asyncio thread touches streams; the step thread calls `before_step` and
`deliver`, which hand over through `call_soon_threadsafe`."""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter, OrderedDict

from scheduler import Decision, FinishReason, CoreSnapshot

from ..engine.engine import Admitted, Engine, EngineEvent, TokenOut
from .prometheus import ServerMetrics
from .reader_gate import ReaderGate
from .request_log import RequestLog
from ..serve_config import ServeSettings
from .stream import EventGone, Reader, Stream, StreamExists, StreamOver, UnknownStream
from .events import (ABORTS, COMPLETED, Done, Failure, HubEvent, Start, Timing, Token,
                            wire_size)

log = logging.getLogger("twinstep.hub")



class Hub:
    def __init__(self, engine: Engine, settings: ServeSettings, metrics: ServerMetrics):
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.policy = settings.backlog_policy()
        self.gate = ReaderGate() if self.policy.engine_waits else None
        self._streams: dict[str, Stream] = {}
        """Every stream a GET can still find."""
        self._active: dict[str, Stream] = {}
        """Streams the engine has not finished."""
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._dropped: set[Stream] = set()
        """Dropped streams whose readers still hold on."""
        self.finished_by_reason: Counter[FinishReason] = Counter()
        """As the engine reported them."""
        self.dropped_events = 0
        self.tokens_after_leave = 0
        self.requests = RequestLog()
        """What the engine did for each request, once it has finished it."""
        self.readers_cut = 0
        self.shutting_down = False
        self._between_steps = self._core_view()
        self._step_started = time.time()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drained: asyncio.Event | None = None
        self._watchdog: asyncio.Task | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the running loop; start watching stalls if the policy drops."""
        self._loop = loop
        self._drained = asyncio.Event()
        interval = self.policy.stall_check_interval_s
        if interval is not None:
            self._watchdog = loop.create_task(self._watch(interval))

    # -- the step thread --------------------------------------------------------

    def before_step(self) -> None:
        if self.gate is not None:
            self.gate.wait()
        self._step_started = time.time()

    def after_step(self) -> None:
        # Taken between steps by the stepping thread (the one consistent view), and
        # handed to the loop behind the step's events: /stats never shows the core
        # idle while the last tokens are still on their way to the streams.
        self._loop.call_soon_threadsafe(self._take_view, self._core_view())

    def _take_view(self, view: tuple[CoreSnapshot, int, int]) -> None:
        self._between_steps = view

    def _core_view(self) -> tuple[CoreSnapshot, int, int]:
        pool = self.engine.core.pool
        return self.engine.core.snapshot(), pool.reservations, pool.releases

    @property
    def snapshot(self) -> CoreSnapshot:
        """The core's state after the last step."""
        return self._between_steps[0]

    def deliver(self, events: list[EngineEvent]) -> None:
        arrived = time.time()
        if self.gate is not None:
            self.gate.add(len(events))
        self._loop.call_soon_threadsafe(self._dispatch, events, self._step_started, arrived)

    # -- requests ---------------------------------------------------------------

    def open(self, prompt_tokens: int, stream_id: str | None = None) -> tuple[Stream, Reader]:
        """A new stream with its `start` event and its first reader, named
        `stream_id` if the client chose one. Open it before submitting to the
        engine, so that no engine event can come before it."""
        if stream_id in self._streams:
            raise StreamExists(stream_id)
        while stream_id is None or stream_id in self._streams:  # a client may have taken it
            stream_id = uuid.uuid4().hex[:16]
        stream = Stream(stream_id, prompt_tokens)
        self._streams[stream.id] = stream
        self._active[stream.id] = stream
        self._append(stream, Start(0, prompt_tokens))
        return stream, self._attach(stream, 0)

    def discard(self, stream: Stream) -> None:
        """Forget a stream the engine refused: it never existed."""
        self._streams.pop(stream.id, None)
        self._active.pop(stream.id, None)
        for reader in stream.readers:
            reader._detached = True
        stream.readers.clear()
        self._recount(stream)

    def follow(self, stream_id: str, after_seq: int | None) -> Reader:
        """Attach a reader from the event after `after_seq` (from the first if None)."""
        stream = self._streams.get(stream_id)
        if stream is None:
            raise UnknownStream(stream_id)
        cursor = 0 if after_seq is None else after_seq + 1
        if cursor > stream.next_seq:
            raise ValueError(f"event {after_seq} of stream {stream_id} has not happened")
        if cursor < stream.base_seq:
            raise EventGone(f"stream {stream_id} keeps events from {stream.base_seq} on; "
                            f"event {cursor} is gone")
        if stream.ended and cursor == stream.next_seq:
            raise StreamOver(stream_id)
        if stream.grace is not None:
            stream.grace.cancel()
            stream.grace = None
        stream.left_at = stream.left_unix = None
        reader = self._attach(stream, cursor)
        self._sync_pause(stream)
        return reader

    def close(self, stream: Stream, reason: FinishReason) -> None:
        """End a stream from this side: its readers get `done` with `reason`, and the
        engine cancels it at the next step. Idempotent."""
        if stream.ended:
            return
        if stream.id in self._active:
            self.engine.cancel(stream.id, reason)
        self._end(stream, reason, stream.completion_tokens, "", time.time())

    def shutdown(self) -> None:
        """Stop admitting; end every open stream with `done` (cancelled)."""
        if self.shutting_down:
            return
        self.shutting_down = True
        if self.gate is not None:
            self.gate.open()
        for stream in list(self._active.values()):
            self.close(stream, FinishReason.CANCELLED)
        self._check_drained()

    async def wait_drained(self, timeout: float) -> bool:
        """After `shutdown`: True once the engine has finished every stream."""
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()

    def stats(self) -> dict:
        summary, admissions, releases = self._between_steps
        return {
            **summary.as_dict(),
            "num_blocks": self.engine.core.config.num_blocks,
            "admissions": admissions,
            "releases": releases,
            "policy": self.policy.name,
            "streams_open": sum(1 for s in self._active.values() if not s.ended),
            "streams_in_grace": sum(1 for s in self._active.values() if s.grace is not None),
            "readers": sum(len(s.readers) for s in self._streams.values()),
            "queued_events": sum(s.next_seq - r.cursor for s in self._streams.values()
                                 if (r := s.slowest()) is not None),
            "aborts": {r.value: self.finished_by_reason[r] for r in ABORTS},
            "finished": {r.value: n for r, n in self.finished_by_reason.items()},
            "dropped_events": self.dropped_events,
            "tokens_after_leave": self.tokens_after_leave,
            "readers_cut": self.readers_cut,
            "engine_waiting_for_readers": self.gate is not None and self.gate.waiting,
            "shutting_down": self.shutting_down,
        }

    # -- engine events ----------------------------------------------------------

    def _dispatch(self, events: list[EngineEvent], step_started: float, arrived: float) -> None:
        try:
            self._take(events, step_started, arrived)
        finally:
            if self.gate is not None:  # whatever happened, never leave the step loop waiting
                self.gate.add(-len(events))
        self._check_drained()

    def _take(self, events: list[EngineEvent], step_started: float, arrived: float) -> None:
        touched: dict[str, Stream] = {}
        for e in events:
            stream = self._active.get(e.seq_id)
            if isinstance(e, TokenOut):
                if stream is not None and stream.left_at is not None:
                    stream.tokens_after_leave += 1
                    self.tokens_after_leave += 1
                    self.metrics.wasted_token()
                if stream is None or stream.ended:
                    self.dropped_events += 1
                    continue
                self._token(stream, e, step_started, arrived)
            elif isinstance(e, Admitted):
                if stream is not None:
                    stream.admitted = step_started
                continue
            else:
                self.finished_by_reason[e.reason] += 1
                if stream is not None:  # the engine's count is final only now
                    self.requests.record(stream, e, arrived)
                if stream is None or stream.ended:
                    self.dropped_events += 1
                    self._active.pop(e.seq_id, None)
                    continue
                del self._active[e.seq_id]
                self._end(stream, e.reason, e.completion_tokens, e.text, arrived)
            touched[stream.id] = stream
        now = time.monotonic()
        for stream in touched.values():
            self._apply_policy(stream, now)
            self._recount(stream)

    def _token(self, stream: Stream, e: TokenOut, step_started: float, arrived: float) -> None:
        if e.index == 0:
            stream.first_token = arrived
            self.metrics.first_token(arrived - stream.arrival, stream.admitted - stream.arrival)
        else:
            self.metrics.token_gap(arrived - stream.last_token)
        stream.last_token = arrived
        stream.completion_tokens += 1
        self._append(stream, Token(stream.next_seq, e.index, e.token_id, e.text))

    def _end(self, stream: Stream, reason: FinishReason, completion_tokens: int, text: str,
             finished: float) -> None:
        if reason is FinishReason.ERROR:
            self._append(stream, Failure(stream.next_seq, "the engine failed while generating "
                                                          "this stream (see the server log)"))
        timing = Timing(stream.arrival, stream.admitted, stream.first_token, finished)
        self._append(stream, Done(stream.next_seq, reason, stream.prompt_tokens,
                                  completion_tokens, text, timing))
        stream.ended = True
        if stream.grace is not None:
            stream.grace.cancel()
            stream.grace = None
        self.metrics.finished(reason, finished - stream.arrival if reason in COMPLETED else None)
        self._ended[stream.id] = None
        while len(self._ended) > self.settings.ended_streams:
            self._streams.pop(self._ended.popitem(last=False)[0], None)
        self._trim(stream)

    def _check_drained(self) -> None:
        if self.shutting_down and not self._active:
            self._drained.set()

    # -- the log ----------------------------------------------------------------

    def _append(self, stream: Stream, event: HubEvent) -> None:
        stream.log.append((event, time.monotonic(), stream.bytes_total))
        stream.bytes_total += wire_size(event)
        stream.next_seq += 1
        for reader in stream.readers:
            reader._wake.set()

    def _trim(self, stream: Stream) -> None:
        keep = stream.next_seq - self.settings.replay_events
        slowest = stream.slowest()
        if slowest is not None:
            keep = min(keep, slowest.cursor)
        while stream.base_seq < keep:
            stream.log.popleft()
            stream.base_seq += 1

    # -- readers ----------------------------------------------------------------

    def _attach(self, stream: Stream, cursor: int) -> Reader:
        reader = Reader(self, stream, cursor)
        stream.readers.append(reader)
        self._recount(stream)
        return reader

    def _read(self, stream: Stream) -> None:
        self._trim(stream)
        self._apply_policy(stream, time.monotonic())
        self._recount(stream)

    def _detach(self, reader: Reader, left: bool) -> None:
        stream = reader.stream
        stream.readers.remove(reader)
        self._recount(stream)
        self._trim(stream)
        if not stream.readers:
            self._dropped.discard(stream)
        if stream.readers or stream.ended or not left:
            return
        stream.left_at, stream.left_unix = time.monotonic(), time.time()
        grace = self.settings.resume_grace_s
        if grace <= 0:
            self.close(stream, FinishReason.CANCELLED)
        else:
            # keep the slot and blocks, make nothing for nobody, until a GET comes back
            stream.grace = self._loop.call_later(grace, self.close, stream, FinishReason.CANCELLED)
            self._sync_pause(stream)

    # -- backlog policy ---------------------------------------------------------

    def _apply_policy(self, stream: Stream, now: float) -> None:
        reader = stream.slowest()
        if stream.ended or reader is None:
            return
        decision = self.policy.decide(stream.backlog(reader), now)
        if decision is Decision.PAUSE:
            stream.policy_paused = True
            self._sync_pause(stream)
        elif decision is Decision.RESUME:
            stream.policy_paused = False
            self._sync_pause(stream)
        elif decision is Decision.DROP:
            stream.dropped_at = now
            self._dropped.add(stream)
            self.close(stream, FinishReason.SLOW_CLIENT)

    def _sync_pause(self, stream: Stream) -> None:
        """The engine's pause follows the policy's and the resume grace's wishes."""
        want = not stream.ended and (stream.policy_paused or stream.left_at is not None)
        if want != stream.engine_paused:
            stream.engine_paused = want
            (self.engine.pause if want else self.engine.resume)(stream.id)

    async def _watch(self, interval: float) -> None:
        """Stalls end without any event arriving: look for them on a timer."""
        stall = self.policy.stall_timeout_s
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for stream in list(self._active.values()):
                self._apply_policy(stream, now)
            for stream in list(self._dropped):
                # a dropped stream's reader gets `stall` more to take its last events
                for reader in stream.readers:
                    if not reader.cut.is_set() and now - max(stream.dropped_at,
                                                             reader.last_read) > stall:
                        reader.cut.set()
                        self.readers_cut += 1

    def _recount(self, stream: Stream) -> None:
        if self.gate is None:
            return
        slowest = stream.slowest()
        unwritten = stream.next_seq - slowest.cursor if slowest is not None else 0
        self.gate.add(unwritten - stream.counted)
        stream.counted = unwritten
