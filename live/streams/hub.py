"""The hub: the asyncio side of the step loop.

Each step's output reaches the hub in one batch (with prefill passes, the first
tokens of a pass that ends before its step come in a batch of their own, ahead of
the step's, which then leaves them out), and becomes the events of the streams it
touched, `Start` … `Done`, in each stream's log (`stream.py`), from
which its readers (the POST that started it, GETs that attached to it) take them.
The backlog policy (`backlog_control.py`) is applied to each stream as its owner's
reader sees it; the step loop never waits for a reader except under `naive`. Every
way a stream can end — the engine finishing it, its last reader leaving, a drop,
shutdown, the engine stopping for good — goes through one idempotent `_end`, and
`close` also cancels it in the engine. Each engine event is handled on its own: one
that raises ends its stream with an error, never the other streams' events.

Only the asyncio thread touches streams; the engine's side (its stepping thread,
or the loop itself reading an engine process's messages) calls `before_step`,
`deliver` and `after_step`, which hand over through a queue that the loop drains
at one wake however many steps wait in it: a loop that lags behind fast steps
applies the backlog policy once per stream for all of them. An engine that stops
ends every open stream (`halt`); one that starts in its place (`restarted`) takes
new streams."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque

from scheduler import Event, FinishEvent, FinishReason, TokenEvent

from ..engine.core_view import CoreView
from ..engine.handle import EngineHandle
from ..engine.step_output import StepOutput
from scheduler.settings import ServeSettings
from .backlog_control import BacklogControl
from .events import COMPLETED, Start, Token
from .prometheus import ServerMetrics
from .request_log import RequestLog
from .stream import EventGone, Reader, Stream, StreamOver
from .stream_table import StreamTable

log = logging.getLogger("twinstep.hub")


class Hub:
    def __init__(self, engine: EngineHandle, settings: ServeSettings, metrics: ServerMetrics):
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.backlog = BacklogControl(settings.backlog_policy(), engine.pause, engine.resume,
                                      self.close)
        self._streams = StreamTable(settings.ended_streams)
        self.requests = RequestLog()
        """What the engine did for each request, once it has finished it."""
        self.dropped_events = 0
        """Engine events for streams that had already ended on this side."""
        self.shutting_down = False
        self.engine_stopped = False
        """The engine has stopped: no stream is served until one starts in its place."""
        self.view = engine.view()
        """The core's state after the last step."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drained: asyncio.Event | None = None
        self._watchdog: asyncio.Task | None = None
        self._handed: deque[tuple[StepOutput, float] | CoreView] = deque()
        """Step outputs and core views from the step thread, for the loop."""
        self._handing = threading.Lock()
        self._woken = False
        """A wake of the loop for `_handed` is on its way."""

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the running loop; start watching stalls if the policy drops."""
        self._loop = loop
        self._drained = asyncio.Event()
        interval = self.backlog.policy.stall_check_interval_s
        if interval is not None:
            self._watchdog = loop.create_task(
                self.backlog.watch(interval, self._streams.running_streams))

    # -- the engine's side ------------------------------------------------------

    def before_step(self) -> None:
        self.backlog.wait_for_readers()

    def deliver(self, output: StepOutput) -> None:
        arrived = time.time()
        self.backlog.in_flight(1)
        self._hand((output, arrived))

    def after_step(self, view: CoreView) -> None:
        # behind the step's output: /stats never shows the core idle while the last
        # tokens are still on their way to the streams
        self._hand(view)

    def _hand(self, item: tuple[StepOutput, float] | CoreView) -> None:
        """Queue `item` for the loop, and wake the loop unless a wake is on its way:
        a loop that lags takes every step waiting at once (`_take_handed`)."""
        self._handed.append(item)
        with self._handing:
            if self._woken:
                return
            self._woken = True
        self._loop.call_soon_threadsafe(self._take_handed)

    def halt(self, reason: str) -> None:
        try:
            self._loop.call_soon_threadsafe(self._halt)
        except RuntimeError:  # the loop is closed: nothing is left to end
            pass

    def restarted(self, view: CoreView) -> None:
        try:
            self._loop.call_soon_threadsafe(self._restarted, view)
        except RuntimeError:
            pass

    def _halt(self) -> None:
        """Every open stream ends with an error; the engine, which will never
        report on them again, is no longer waited for."""
        self.engine_stopped = True
        self.backlog.stop_waiting()
        for stream in self._streams.running_streams():
            self._streams.finished(stream.seq_id)
            if not stream.ended:
                self._isolated(stream, self._end, stream, FinishReason.ERROR,
                               stream.completion_tokens, "", time.time())
        self._check_drained()

    def _restarted(self, view: CoreView) -> None:
        self.view = view
        self.engine_stopped = False
        self.backlog.wait_again()

    # -- requests ---------------------------------------------------------------

    def open(self, prompt_tokens: int, stream_id: str | None = None,
             key: str | None = None) -> tuple[Stream, Reader]:
        """A new stream of `key` with its `start` event and its first reader, named
        `stream_id` if the client chose one. Open it before submitting to the
        engine, so that no engine event can come before it."""
        stream = self._streams.open(prompt_tokens, stream_id, key)
        stream.append(Start(0, prompt_tokens))
        return stream, self._attach(stream, 0)

    def discard(self, stream: Stream) -> None:
        """Forget a stream the engine refused: it never existed."""
        self._streams.discard(stream)
        for reader in stream.readers:
            reader.abandon()
        stream.readers.clear()
        self.backlog.recount(stream)

    def follow(self, stream_id: str, after_seq: int | None, key: str | None = None) -> Reader:
        """Attach a reader to `key`'s stream from the event after `after_seq` (from
        the first if None)."""
        stream = self._streams.find(stream_id, key)
        cursor = 0 if after_seq is None else after_seq + 1
        if cursor > stream.next_seq:
            raise ValueError(f"event {after_seq} of stream {stream_id} has not happened")
        if cursor < stream.base_seq:
            raise EventGone(f"stream {stream_id} keeps events from {stream.base_seq} on; "
                            f"event {cursor} is gone")
        if stream.ended and cursor == stream.next_seq:
            raise StreamOver(stream_id)
        stream.check_room(self.settings.max_readers_per_stream)
        stream.stop_grace()
        stream.left_at = stream.left_unix = None
        reader = self._attach(stream, cursor)
        self.backlog.sync_pause(stream)
        return reader

    def close(self, stream: Stream, reason: FinishReason) -> None:
        """End a stream from this side: its readers get `done` with `reason`, and the
        engine cancels it at the next step. Idempotent."""
        if stream.ended:
            return
        if self._streams.is_running(stream):
            self.engine.cancel(stream.seq_id, reason)
        self._end(stream, reason, stream.completion_tokens, "", time.time())

    def shutdown(self) -> None:
        """Stop admitting; end every open stream with `done` (cancelled)."""
        if self.shutting_down:
            return
        self.shutting_down = True
        self.backlog.stop_waiting()
        for stream in self._streams.running_streams():
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
        return {
            **self.view.as_dict(),
            "num_blocks": self.engine.facts.config.num_blocks,
            "policy": self.backlog.policy.name,
            **self._streams.counts(),
            "dropped_events": self.dropped_events,
            "tokens_after_leave": self.metrics.tokens_after_leave,
            "readers_cut": self.backlog.readers_cut,
            "engine_waiting_for_readers": self.backlog.engine_waiting,
            "shutting_down": self.shutting_down,
            "engine_stopped": self.engine_stopped,
            "engine_starts": self.engine.starts,
            "step_log_errors": self.view.step_log_errors,
        }

    # -- a step's output --------------------------------------------------------

    def _take_handed(self) -> None:
        """Everything the step thread handed on since the last wake, in order; then
        the backlog policy, once for each stream the steps touched."""
        with self._handing:
            self._woken = False
        touched: dict[str, Stream] = {}
        handed = self._handed
        while handed:
            item = handed.popleft()
            if type(item) is CoreView:
                self.view = item
                continue
            try:
                self._take(*item, touched)
            finally:
                self.backlog.in_flight(-1)  # whatever happened, never leave the step loop waiting
        now = time.monotonic()
        for stream in touched.values():
            self._isolated(stream, self.backlog.apply, stream, now)
        self._check_drained()

    def _take(self, output: StepOutput, arrived: float, touched: dict[str, Stream]) -> None:
        for seq_id in output.admitted:
            stream = self._streams.running(seq_id)
            if stream is not None:
                stream.admitted = output.started
        now = time.monotonic()
        running = self._streams.running
        for e in output.events:
            stream = running(e.seq_id)
            # `_isolated`, written out: this runs for every token
            try:
                self._event(e, stream, output, arrived, now)
            except Exception:
                self._failed(stream)
            if stream is not None:
                touched[stream.seq_id] = stream

    def _isolated(self, stream: Stream | None, handle, *args) -> None:
        """`handle(*args)` for one stream: if it raises, that stream alone ends with
        an error, and the other streams' events of the step are still handled."""
        try:
            handle(*args)
        except Exception:
            self._failed(stream)

    def _failed(self, stream: Stream | None) -> None:
        """Handling the stream raised (the exception being handled): it alone ends."""
        log.exception("handling stream %s raised; it ends with an error",
                      stream.id if stream is not None else "(unknown)")
        if stream is None or stream.ended:
            return
        try:
            self.close(stream, FinishReason.ERROR)
        except Exception:
            log.exception("ending stream %s raised", stream.id)

    def _event(self, e: Event, stream: Stream | None, output: StepOutput, arrived: float,
               now: float) -> None:
        if type(e) is TokenEvent:
            # made after its client left: its step ended after the leave (a step
            # that ended before, handed on while the leave was seen, made it for
            # a client still there)
            if stream is not None and stream.left_unix is not None and stream.left_unix < arrived:
                stream.tokens_after_leave += 1
                self.metrics.wasted_token()
            if stream is None or stream.ended:
                self.dropped_events += 1
                return
            self._token(stream, e, output.deltas[e.seq_id], arrived, now)
            return
        self._finished(stream, e, arrived)
        if stream is None or stream.ended:
            self.dropped_events += 1
            return
        self._end(stream, e.reason, e.num_generated, output.held[e.seq_id], arrived)

    def _token(self, stream: Stream, e: TokenEvent, text: str, arrived: float,
               now: float) -> None:
        if e.index == 0:
            stream.first_token = arrived
            self.metrics.first_token(arrived - stream.arrival, stream.admitted - stream.arrival)
        else:
            self.metrics.token_gap(arrived - stream.last_token)
        stream.last_token = arrived
        stream.completion_tokens += 1
        stream.append(Token(stream.next_seq, e.index, e.token_id, text), now)

    def _finished(self, stream: Stream | None, e: FinishEvent, arrived: float) -> None:
        """The engine has finished it: its count is final only now."""
        self._streams.finished(e.seq_id)
        if stream is not None:
            self.requests.record(stream, e, arrived)

    def _end(self, stream: Stream, reason: FinishReason, completion_tokens: int, text: str,
             finished: float) -> None:
        stream.end(reason, completion_tokens, text, finished)
        self.backlog.ended(stream)
        self.metrics.finished(reason, finished - stream.arrival if reason in COMPLETED else None)
        self.metrics.judge(reason, stream.arrival, stream.first_token, stream.last_token,
                           stream.completion_tokens)
        self._streams.ended(stream)
        stream.trim(self.settings.replay_events)

    def _check_drained(self) -> None:
        if self.shutting_down and not self._streams.any_running:
            self._drained.set()

    # -- readers ----------------------------------------------------------------

    def _attach(self, stream: Stream, cursor: int) -> Reader:
        reader = Reader(stream, cursor, self._read, self._detach)
        stream.add(reader)
        self.backlog.recount(stream)
        return reader

    def _read(self, stream: Stream) -> None:
        stream.trim(self.settings.replay_events)
        self.backlog.apply(stream, time.monotonic())

    def _detach(self, reader: Reader, left: bool) -> None:
        stream = reader.stream
        stream.remove(reader)
        self.backlog.recount(stream)
        stream.trim(self.settings.replay_events)
        self.backlog.reader_gone(stream)
        if stream.readers or stream.ended or not left:
            return
        stream.left_at, stream.left_unix = time.monotonic(), time.time()
        grace = self.settings.resume_grace_s
        if grace <= 0:
            self.close(stream, FinishReason.CANCELLED)
        else:
            # keep the slot and blocks, make nothing for nobody, until a GET comes back
            stream.grace = self._loop.call_later(grace, self.close, stream, FinishReason.CANCELLED)
            self.backlog.sync_pause(stream)
