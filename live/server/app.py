"""The HTTP server: a Starlette app over one engine, its step loop and the hub,
and the uvicorn server that runs it and shuts it down gracefully.

Routes:
    POST /v1/stream, GET /v1/stream/{id}       the project's own SSE schema
    POST /v1/completions, /v1/chat/completions  OpenAI-compatible
    GET  /v1/models, /v1/models/{model}
    POST /v1/messages                           Anthropic-compatible
    GET  /health, /stats, /metrics
    GET  /v1/engine, /v1/steps                  what a simulator needs to mirror this server
    GET  /v1/requests                           what the engine did for each finished request

A request is read and checked, tokenized and submitted before any byte of the
answer: every refusal is an ordinary JSON error in its API's envelope."""
from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import signal
import socket
import time
from typing import Callable

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from scheduler import QueueFull, RequestTooLarge, SubmitRefused

from . import wire_anthropic, wire_openai, wire_stream
from ..engine.engine import Engine
from .engine_info import describe
from .h2_flow import AutoBackpressuredProtocol
from ..streams.hub import Hub
from ..engine.record_ring import RecordsLost
from ..streams.stream import EventGone, Reader, Stream, StreamExists, StreamOver, UnknownStream
from ..streams.events import Done, Token
from ..streams.prometheus import CONTENT_TYPE, ServerMetrics
from ..serve_config import ServeSettings
from .sse import EventStreamResponse, wait_for_disconnect
from ..engine.step_loop import StepLoop
from .validation import (ErrorKind, GenerationRequest, RequestError, ServedModel, read_json,
                         request_id)

log = logging.getLogger("twinstep.server")


class LiveService:
    """Everything behind the routes: the engine and its step loop, the hub, the
    metrics, and the shutdown that ends them in order."""

    def __init__(self, engine: Engine, served: ServedModel, settings: ServeSettings):
        self.engine = engine
        self.served = served
        self.settings = settings
        self.metrics = ServerMetrics()
        self.hub = Hub(engine, settings, self.metrics)
        self.step_loop = StepLoop(engine, self.hub.deliver, self.hub.before_step,
                                  self.hub.after_step)
        self.started = int(time.time())
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.hub.bind(self._loop)
        self.step_loop.start()

    def submit(self, request: GenerationRequest, stream_id: str | None = None) -> tuple[Stream, Reader]:
        """A stream for an accepted request, named `stream_id` if the client chose
        one, or the refusal."""
        if self.hub.shutting_down:
            raise RequestError(ErrorKind.UNAVAILABLE, "the server is shutting down",
                               retry_after_s=self.settings.retry_after_s)
        try:
            stream, reader = self.hub.open(len(request.prompt_ids), stream_id)
        except StreamExists:
            raise RequestError(ErrorKind.CONFLICT, f"a stream named {stream_id!r} is open or was "
                                                   f"recently: choose another X-Request-Id",
                               "X-Request-Id") from None
        try:
            self.engine.submit(stream.id, request.prompt_ids, request.max_new_tokens,
                               request.sampling)
        except SubmitRefused as exc:
            self.hub.discard(stream)
            raise self._refusal(exc) from None
        return stream, reader

    def _refusal(self, exc: SubmitRefused) -> RequestError:
        if isinstance(exc, QueueFull):
            return RequestError(ErrorKind.QUEUE_FULL, str(exc),
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
        self.step_loop.stop()
        self.engine.step_log.close()


# -- responses ---------------------------------------------------------------

class CollectedResponse:
    """A non-streaming answer. The stream is read as it comes (so it never holds
    the step loop back) while the client is watched for leaving, as a stream's is;
    then `answer(text, done)` is the body, or the error it raises."""

    def __init__(self, reader: Reader, answer: Callable[[str, Done], dict],
                 error_body: Callable[[RequestError], dict], headers: dict[str, str]):
        self.reader = reader
        self.answer = answer
        self.error_body = error_body
        self.headers = headers

    async def __call__(self, scope, receive, send) -> None:
        left = True
        try:
            collect = asyncio.ensure_future(self._collect())
            listener = asyncio.ensure_future(wait_for_disconnect(receive))
            try:
                await asyncio.wait((collect, listener), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (collect, listener):
                    task.cancel()
                await asyncio.gather(collect, listener, return_exceptions=True)
            if collect.cancelled() or collect.exception() is not None:
                return
            left = False
            text, done = collect.result()
            try:
                response = JSONResponse(self.answer(text, done), headers=self.headers)
            except RequestError as exc:
                response = JSONResponse(self.error_body(exc), exc.kind.status,
                                        {**self.headers, **exc.headers})
            await response(scope, receive, send)
        finally:
            self.reader.detach(left=left)

    async def _collect(self) -> tuple[str, Done]:
        parts = []
        while True:
            event = await self.reader.next()
            self.reader.ack()
            if isinstance(event, Token):
                parts.append(event.text)
            elif isinstance(event, Done):
                parts.append(event.text)
                return "".join(parts), event


def _service(request: Request) -> LiveService:
    return request.app.state.service


def _refuse(service: LiveService, error: RequestError, envelope: Callable[[RequestError], dict]):
    service.metrics.refused(error.kind.status)
    return JSONResponse(envelope(error), error.kind.status, error.headers)


def _event_stream(service: LiveService, reader: Reader, renderer, stream_id: str):
    return EventStreamResponse(reader, renderer, service.settings.keepalive_s,
                               [(b"x-request-id", stream_id.encode())],
                               service.settings.event_padding)


def _answer(service: LiveService, request: GenerationRequest, reader: Reader, renderer,
            stream_id: str, answer: Callable[[str, Done], dict],
            envelope: Callable[[RequestError], dict]):
    if request.stream:
        return _event_stream(service, reader, renderer, stream_id)
    return CollectedResponse(reader, answer, envelope, {"X-Request-Id": stream_id})


# -- the project's own stream --------------------------------------------------

async def post_stream(request: Request):
    service = _service(request)
    try:
        body = await read_json(request, service.settings.max_body_bytes)
        stream, reader = service.submit(wire_stream.parse(body, service.served), request_id(request))
    except RequestError as exc:
        return _refuse(service, exc, wire_stream.error_body)
    return _event_stream(service, reader, wire_stream.StreamRenderer(stream.id), stream.id)


async def get_stream(request: Request):
    """Follow a stream (again) from the event after `Last-Event-ID`."""
    service = _service(request)
    stream_id = request.path_params["stream_id"]
    try:
        after = wire_stream.last_event_seq(request.headers.get("last-event-id"), stream_id)
        reader = service.hub.follow(stream_id, after)
    except UnknownStream:
        error = RequestError(ErrorKind.NOT_FOUND, f"no stream {stream_id!r} (unknown, or "
                                                  "finished long enough ago to be forgotten)")
        return _refuse(service, error, wire_stream.error_body)
    except EventGone as exc:
        return _refuse(service, RequestError(ErrorKind.GONE, str(exc), "Last-Event-ID"),
                       wire_stream.error_body)
    except StreamOver:
        return Response(status_code=204)  # tells an EventSource to stop reconnecting
    except ValueError as exc:
        return _refuse(service, RequestError(ErrorKind.INVALID, str(exc), "Last-Event-ID"),
                       wire_stream.error_body)
    except RequestError as exc:
        return _refuse(service, exc, wire_stream.error_body)
    return _event_stream(service, reader, wire_stream.StreamRenderer(stream_id), stream_id)


# -- OpenAI --------------------------------------------------------------------

async def post_completions(request: Request):
    return await _openai(request, chat=False)


async def post_chat_completions(request: Request):
    return await _openai(request, chat=True)


async def _openai(request: Request, chat: bool):
    service = _service(request)
    try:
        body = await read_json(request, service.settings.max_body_bytes)
        if chat:
            generation = wire_openai.parse_chat(body, service.served,
                                                service.settings.default_max_tokens)
        else:
            generation = wire_openai.parse_completion(body, service.served)
        stream, reader = service.submit(generation, request_id(request))
    except RequestError as exc:
        return _refuse(service, exc, wire_openai.error_body)
    response_id = f"{'chatcmpl' if chat else 'cmpl'}-{stream.id}"
    model = service.served.name
    renderer = wire_openai.ChunkRenderer(chat, response_id, model, generation)
    return _answer(service, generation, reader, renderer, stream.id,
                   lambda text, done: wire_openai.completion_body(chat, response_id, model,
                                                                  text, done),
                   wire_openai.error_body)


async def get_models(request: Request):
    service = _service(request)
    return JSONResponse(wire_openai.models_body(service.served, service.started))


async def get_model(request: Request):
    service = _service(request)
    name = request.path_params["model"]
    if not service.served.accepts(name):
        error = RequestError(ErrorKind.NOT_FOUND, f"the model '{name}' is not served here",
                             "model")
        return _refuse(service, error, wire_openai.error_body)
    return JSONResponse(wire_openai.model_card(service.served, service.started))


# -- Anthropic -----------------------------------------------------------------

async def post_messages(request: Request):
    service = _service(request)
    try:
        body = await read_json(request, service.settings.max_body_bytes)
        generation, stops = wire_anthropic.parse_messages(body, service.served)
        stream, reader = service.submit(generation, request_id(request))
    except RequestError as exc:
        return _refuse(service, exc, wire_anthropic.error_body)
    message_id = f"msg_{stream.id}"
    model = service.served.name
    renderer = wire_anthropic.MessageRenderer(message_id, model, stops)
    return _answer(service, generation, reader, renderer, stream.id,
                   lambda text, done: wire_anthropic.message_body(message_id, model, text,
                                                                  done, stops),
                   wire_anthropic.error_body)


# -- operations ----------------------------------------------------------------

async def health(request: Request):
    service = _service(request)
    if service.hub.shutting_down:
        return JSONResponse({"status": "shutting_down"}, 503)
    if not service.step_loop.alive:
        return JSONResponse({"status": "engine_stopped"}, 503)
    return JSONResponse({"status": "ok", "model": service.served.name})


async def stats(request: Request):
    return JSONResponse(_service(request).hub.stats())


async def metrics(request: Request):
    service = _service(request)
    body = service.metrics.exposition(service.hub.snapshot, service.engine.core.config.num_blocks)
    return Response(body, media_type=CONTENT_TYPE)


async def engine_info(request: Request):
    """The engine behind this server: model, device, dtype, hardware, torch threads,
    the scheduler's settings, the backlog policy and the streams' settings, and the
    step ring (its size, the newest step): what a simulator needs to mirror it."""
    service = _service(request)
    return JSONResponse(describe(service.engine, service.hub.requests, service.served.name,
                                 service.settings))


RECORDS_PER_PAGE = 10_000


async def steps(request: Request):
    """`GET /v1/steps?after=N&limit=M`: the records of the steps after step N (steps
    count from 1; N is 0 by default), oldest first, at most M (1 to 10,000, the
    default), as JSON lines. A page shorter than M is the end for now.

    Steps that have fallen out of the ring are not skipped over: asking for them is
    a 410 Gone whose message says which were lost, with the last of them in
    `X-Records-Lost-Through` (ask again after it to take what is still kept)."""
    service = _service(request)
    return await _ring_page(request, service, service.engine.step_log.after)


async def finished_requests(request: Request):
    """`GET /v1/requests?after=N&limit=M`: the records of the requests that finished
    after the Nth to finish, as `/v1/steps` pages steps: id, prompt tokens, arrival,
    admission, first token and finish (Unix seconds, the engine's view), finish
    reason, tokens made, tokens made after the client left, and when it left."""
    service = _service(request)
    return await _ring_page(request, service, service.hub.requests.after)


async def _ring_page(request: Request, service: LiveService, read: Callable[[int, int], list[dict]]):
    try:
        after = _count(request, "after", 0, 0, None)
        limit = _count(request, "limit", RECORDS_PER_PAGE, 1, RECORDS_PER_PAGE)
    except RequestError as exc:
        return _refuse(service, exc, wire_stream.error_body)
    try:
        records = read(after, limit)
    except RecordsLost as exc:
        error = RequestError(ErrorKind.GONE, str(exc), "after")
        return JSONResponse(wire_stream.error_body(error), error.kind.status,
                            {"X-Records-Lost-Through": str(exc.lost_through)})
    # off the event loop: a full page is a tenth of a second of JSON
    body = await run_in_threadpool(lambda: "".join(json.dumps(r) + "\n" for r in records))
    return Response(body, media_type="application/x-ndjson")


def _count(request: Request, name: str, default: int, least: int, most: int | None) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not least <= int(text) <= (most or int(text)):
        bounds = f"of at least {least}" if most is None else f"from {least} to {most}"
        raise RequestError(ErrorKind.INVALID, f"{name} must be an integer {bounds}, got {text!r}",
                           name)
    return int(text)


ROUTES = [
    Route("/v1/stream", post_stream, methods=["POST"]),
    Route("/v1/stream/{stream_id}", get_stream, methods=["GET"]),
    Route("/v1/completions", post_completions, methods=["POST"]),
    Route("/v1/chat/completions", post_chat_completions, methods=["POST"]),
    Route("/v1/models", get_models, methods=["GET"]),
    Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    Route("/v1/messages", post_messages, methods=["POST"]),
    Route("/health", health, methods=["GET"]),
    Route("/stats", stats, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/v1/engine", engine_info, methods=["GET"]),
    Route("/v1/steps", steps, methods=["GET"]),
    Route("/v1/requests", finished_requests, methods=["GET"]),
]


def create_app(engine: Engine, served: ServedModel, settings: ServeSettings) -> Starlette:
    service = LiveService(engine, served, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(routes=ROUTES, lifespan=lifespan)
    app.state.service = service
    return app


# -- building and running ------------------------------------------------------

def build_engine(settings: ServeSettings) -> tuple[Engine, ServedModel]:
    """Load the model and put an engine around it, as `settings` say."""
    import torch

    from ..runner.architectures import kv_layout
    from ..runner.gpu_memory import gpu_kv_blocks
    from ..runner.model_runner import ModelRunner
    from ..runner.models import load_model
    from ..engine.step_log import StepLog

    dtype = getattr(torch, settings.dtype)
    if settings.threads:
        torch.set_num_threads(settings.threads)
    loaded = load_model(settings.model, settings.device, dtype)
    on_gpu = torch.device(settings.device).type == "cuda"
    num_blocks = settings.num_blocks
    if num_blocks is None and on_gpu:
        num_blocks = gpu_kv_blocks(settings.gpu_memory_fraction, kv_layout(loaded.model.config),
                                   settings.block_size, dtype, settings.device)
    elif num_blocks is None:
        num_blocks = ModelRunner.blocks_for_budget(loaded, settings.kv_cache_mb << 20,
                                                   settings.block_size, dtype)
    graphs = on_gpu and not settings.eager and importlib.util.find_spec("triton") is not None
    runner = ModelRunner(loaded, num_blocks, settings.block_size, settings.device, dtype,
                         cuda_graph_max_batch=settings.max_batch if graphs else 0)
    step_log = StepLog(settings.step_log, settings.device,
                       {"model": loaded.name, "dtype": settings.dtype}, settings.step_ring)
    config = settings.scheduler_config(num_blocks, loaded.max_model_len)
    engine = Engine(runner, loaded.tokenizer, config, step_log)
    return engine, ServedModel(loaded.name, loaded.tokenizer, loaded.max_model_len,
                               runner.vocab_size)


class NoDelay:
    """Mixed into uvicorn's protocol: TCP_NODELAY on every connection, so that each
    event leaves at once rather than waiting on Nagle for the previous one's ACK.
    asyncio sets it only when the listening socket says IPPROTO_TCP, which a socket
    handed over by a supervisor or a test often does not."""

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


class LiveConfig(uvicorn.Config):
    """uvicorn's settings, with `NoDelay` mixed into whichever protocol they choose,
    and with `http2` the same choice of protocol per connection (the HTTP/2 preface,
    or HTTP/1.1) but HTTP/2 with backpressure (`h2_flow`)."""

    def load(self) -> None:
        super().load()
        chosen = AutoBackpressuredProtocol if self.http2 else self.http_protocol_class
        self.http_protocol_class = type(f"NoDelay{chosen.__name__}", (NoDelay, chosen), {})


class LiveServer(uvicorn.Server):
    """uvicorn, with the hub told at the signal (not after the connections close,
    when the lifespan ends) so that open streams get their last event at once; and
    an exit status of 0 after a graceful stop rather than the signal re-raised.
    With `settings.http2`, cleartext HTTP/2 (h2c with prior knowledge) and
    HTTP/1.1 on the same port."""

    def __init__(self, app: Starlette, host: str, port: int, log_level: str = "info"):
        self.service: LiveService = app.state.service
        settings = self.service.settings
        super().__init__(LiveConfig(
            app, host=host, port=port, log_level=log_level, lifespan="on",
            http="zttp" if settings.http2 else "auto", http2=settings.http2,
            timeout_graceful_shutdown=settings.shutdown_timeout_s))

    def handle_exit(self, sig, frame) -> None:
        self.service.request_shutdown()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl+C
        else:
            self.should_exit = True


def serve(settings: ServeSettings) -> int:
    engine, served = build_engine(settings)
    config = engine.core.config
    log.info("serving %s on http://%s:%d (device %s, %s; %d KV blocks of %d; batch %d; "
             "policy %s)", served.name, settings.host, settings.port, settings.device,
             settings.dtype, config.num_blocks, config.block_size, config.max_batch,
             settings.policy)
    log.info("settings %s", json.dumps(settings.as_dict()))
    LiveServer(create_app(engine, served, settings), settings.host, settings.port).run()
    return 0
