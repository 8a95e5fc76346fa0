"""The routes clients generate through, one wire format each: the project's own
stream (and following it again), OpenAI completions and chat completions with the
model list their clients read first, and Anthropic messages.

A request is read and checked, tokenized and submitted before any byte of the
answer: every refusal is an ordinary JSON error in its API's envelope."""
from __future__ import annotations

from typing import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..streams.stream import EventGone, ReadersFull, StreamOver, UnknownStream
from . import wire_anthropic, wire_openai, wire_stream
from .access import KEY
from .replies import answer, event_stream, refuse, service_of
from .service import LiveService
from .sse import retry_line
from .validation import ErrorKind, RequestError, read_json, request_id


INLINE_BODY_BYTES = 1024
"""A text prompt in a body of at most this many bytes is tokenized on the event
loop: in tens of microseconds, less than the hop to a worker thread and back, which
was most of a short request's way to the engine."""


def _always_tokenizes(body: dict) -> bool:
    return True


async def _read(request: Request, service: LiveService, parse: Callable,
                tokenizes: Callable[[dict], bool] = _always_tokenizes):
    """The body read and checked by `parse`. A long text prompt is tokenized off the
    event loop, which writes every stream (the tokenizer lets go of the GIL, so the
    loop goes on meanwhile). A prompt of token ids is checked on the loop whatever
    its length: the check holds the GIL, so a worker thread would not free the loop,
    and it costs about what decoding the JSON already did there. Sent to a worker,
    a burst's long prompts reached the engine after its short ones, out of the
    order they came in."""
    settings = service.settings
    body = await read_json(request, settings.max_body_bytes, settings.body_timeout_s)
    declared = request.headers.get("content-length", "")
    if (not tokenizes(body)
            or declared.isascii() and declared.isdigit() and int(declared) <= INLINE_BODY_BYTES):
        return parse(body, service.served, settings)
    return await run_in_threadpool(parse, body, service.served, settings)


def key_of(request: Request) -> str | None:
    """The name of the client key the guard accepted (None on an open server)."""
    return request.scope["state"].get(KEY)


# -- the project's own stream --------------------------------------------------

async def post_stream(request: Request):
    service = service_of(request)
    try:
        generation = await _read(request, service, wire_stream.parse, wire_stream.tokenizes)
        stream, reader = await service.submit(generation, request_id(request), key_of(request))
    except RequestError as exc:
        return refuse(service, exc, wire_stream.error_body)
    return _own_stream(service, reader, stream.id)


async def get_stream(request: Request):
    """Follow a stream (again) from the event after `Last-Event-ID`."""
    service = service_of(request)
    stream_id = request.path_params["stream_id"]
    try:
        after = wire_stream.last_event_seq(request.headers.get("last-event-id"), stream_id)
        reader = service.hub.follow(stream_id, after, key_of(request))
    except UnknownStream:
        error = RequestError(ErrorKind.NOT_FOUND, f"no stream {stream_id!r} (unknown, or "
                                                  "finished long enough ago to be forgotten)")
        return refuse(service, error, wire_stream.error_body)
    except EventGone as exc:
        return refuse(service, RequestError(ErrorKind.GONE, str(exc), "Last-Event-ID"),
                      wire_stream.error_body)
    except StreamOver:
        return Response(status_code=204)  # tells an EventSource to stop reconnecting
    except ReadersFull as exc:
        return refuse(service, RequestError(ErrorKind.QUEUE_FULL, str(exc)),
                      wire_stream.error_body)
    except ValueError as exc:
        return refuse(service, RequestError(ErrorKind.INVALID, str(exc), "Last-Event-ID"),
                      wire_stream.error_body)
    except RequestError as exc:
        return refuse(service, exc, wire_stream.error_body)
    return _own_stream(service, reader, stream_id)


def _own_stream(service: LiveService, reader, stream_id: str):
    """The own format's response, opened with the `retry:` an EventSource takes."""
    retry_ms = service.settings.sse_retry_ms
    return event_stream(service, reader, wire_stream.StreamRenderer(stream_id), stream_id,
                        retry_line(retry_ms) if retry_ms else b"")


# -- OpenAI --------------------------------------------------------------------

async def post_completions(request: Request):
    return await _openai(request, chat=False)


async def post_chat_completions(request: Request):
    return await _openai(request, chat=True)


async def _openai(request: Request, chat: bool):
    service = service_of(request)
    try:
        generation = await (_read(request, service, wire_openai.parse_chat) if chat else
                            _read(request, service, wire_openai.parse_completion,
                                  wire_openai.completion_tokenizes))
        stream, reader = await service.submit(generation, request_id(request), key_of(request))
    except RequestError as exc:
        return refuse(service, exc, wire_openai.error_body)
    response_id = f"{'chatcmpl' if chat else 'cmpl'}-{stream.id}"
    model = service.served.name
    renderer = wire_openai.ChunkRenderer(chat, response_id, model, generation)
    return answer(service, generation, reader, renderer, stream.id,
                  lambda text, done: wire_openai.completion_body(chat, response_id, model,
                                                                 text, done),
                  wire_openai.error_body)


async def get_models(request: Request):
    service = service_of(request)
    return JSONResponse(wire_openai.models_body(service.served, service.started))


async def get_model(request: Request):
    service = service_of(request)
    name = request.path_params["model"]
    if not service.served.accepts(name):
        error = RequestError(ErrorKind.NOT_FOUND, f"the model '{name}' is not served here",
                             "model")
        return refuse(service, error, wire_openai.error_body)
    return JSONResponse(wire_openai.model_card(service.served, service.started))


# -- Anthropic -----------------------------------------------------------------

async def post_messages(request: Request):
    service = service_of(request)
    try:
        generation, stops = await _read(request, service, wire_anthropic.parse_messages)
        stream, reader = await service.submit(generation, request_id(request), key_of(request))
    except RequestError as exc:
        return refuse(service, exc, wire_anthropic.error_body)
    message_id = f"msg_{stream.id}"
    model = service.served.name
    renderer = wire_anthropic.MessageRenderer(message_id, model, stops)
    return answer(service, generation, reader, renderer, stream.id,
                  lambda text, done: wire_anthropic.message_body(message_id, model, text,
                                                                 done, stops),
                  wire_anthropic.error_body)


ROUTES = [
    Route("/v1/stream", post_stream, methods=["POST"]),
    Route("/v1/stream/{stream_id}", get_stream, methods=["GET"]),
    Route("/v1/completions", post_completions, methods=["POST"]),
    Route("/v1/chat/completions", post_chat_completions, methods=["POST"]),
    Route("/v1/models", get_models, methods=["GET"]),
    Route("/v1/models/{model:path}", get_model, methods=["GET"]),
    Route("/v1/messages", post_messages, methods=["POST"]),
]
