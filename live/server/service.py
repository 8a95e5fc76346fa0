"""The service the routes share: what a request is submitted to, and what a
graceful shutdown ends."""
from __future__ import annotations

import asyncio
import logging
import time

from scheduler import KeyLimitReached, QueueFull, RequestTooLarge, SubmitRefused

from ..engine.engine import Engine
from ..engine.engine_thread import EngineThread
from ..engine.handle import EngineHandle, EngineStopped
from scheduler.settings import ServeSettings
from traces.slo import Slo
from ..streams.hub import Hub
from ..streams.prometheus import ServerMetrics
from ..streams.stream import Reader, Stream, StreamExists
from .validation import ErrorKind, GenerationRequest, RequestError, ServedModel

log = logging.getLogger("twinstep.server")


class LiveService:
    """Everything behind the routes: the engine, the hub, the metrics, and the
    shutdown that ends them in order."""

    def __init__(self, engine: Engine | EngineHandle, served: ServedModel,
                 settings: ServeSettings, key_names: list[str]):
        """`engine`: an `Engine` steps in a thread of this process; a handle (an
        `EngineProcess`) as it is. `key_names`: the client keys' names, which label
        their metrics."""
        self.engine = EngineThread(engine, settings.device) if isinstance(engine, Engine) else engine
        self.served = served
        self.settings = settings
        self.metrics = ServerMetrics(key_names,
                                     Slo.given(settings.slo_ttft_s, settings.slo_tpot_s))
        self.hub = Hub(self.engine, settings, self.metrics)
        self.started = int(time.time())
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.hub.bind(self._loop)
        self.engine.start(self.hub)

    async def submit(self, request: GenerationRequest, stream_id: str | None,
               key: str | None) -> tuple[Stream, Reader]:
        """A stream for a request of `key` (a client key's name, None on an open
        server), named `stream_id` if the client chose one, or the refusal."""
        if self.hub.shutting_down:
            raise RequestError(ErrorKind.UNAVAILABLE, "the server is shutting down",
                               retry_after_s=self.settings.retry_after_s)
        if self.engine.halted is not None:
            # never accept work into an engine that will not step again
            raise self._stopped()
        try:
            stream, reader = self.hub.open(len(request.prompt_ids), stream_id, key)
        except StreamExists:
            raise RequestError(ErrorKind.CONFLICT, f"a stream named {stream_id!r} is open or was "
                                                   f"recently: choose another X-Request-Id",
                               "X-Request-Id") from None
        try:
            await self.engine.submit(stream.seq_id, request.prompt_ids, request.max_new_tokens,
                                     request.sampling, key)
        except SubmitRefused as exc:
            self.hub.discard(stream)
            raise self._refusal(exc) from None
        except EngineStopped:
            self.hub.discard(stream)
            raise self._stopped() from None
        return stream, reader

    def _stopped(self) -> RequestError:
        return RequestError(ErrorKind.UNAVAILABLE, "the engine has stopped after a failure "
                                                   "(see the server log)",
                            retry_after_s=self.settings.retry_after_s)

    def _refusal(self, exc: SubmitRefused) -> RequestError:
        if isinstance(exc, QueueFull):
            return RequestError(ErrorKind.QUEUE_FULL, str(exc),
                                retry_after_s=self.settings.retry_after_s)
        if isinstance(exc, KeyLimitReached):
            self.metrics.key_refused(exc.key, exc.what)
            return RequestError(ErrorKind.KEY_LIMIT, str(exc),
                                retry_after_s=self.settings.retry_after_s)
        kind = ErrorKind.TOO_LONG if isinstance(exc, RequestTooLarge) else ErrorKind.INVALID
        return RequestError(kind, str(exc))

    def request_shutdown(self) -> None:
        """From any thread (a signal handler, a test): stop admitting, end the streams."""
        if self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self.hub.shutdown)
        except RuntimeError:  # the loop is closed: the service stopped already
            pass

    async def stop(self) -> None:
        """After the connections have closed: wait for the engine to let go of every
        stream, then stop the step loop."""
        self.hub.shutdown()
        if not await self.hub.wait_drained(self.settings.shutdown_timeout_s):
            log.error("the engine still held streams %.1f s after shutdown began",
                      self.settings.shutdown_timeout_s)
        self.engine.stop()
