"""What every route answers with: a refusal in its API's envelope, counted; an
event stream; or, for a request that did not ask to stream, the collected body."""
from __future__ import annotations

from typing import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse

from ..streams.events import Done
from ..streams.stream import Reader
from . import wire_anthropic, wire_openai, wire_stream
from .collected import CollectedResponse
from .service import LiveService
from .sse import EventStreamResponse
from .validation import GenerationRequest, RequestError


OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/models")


def envelope_for(path: str) -> Callable[[RequestError], dict]:
    """The error envelope of the API a path belongs to (the project's own for the
    rest)."""
    if path.startswith("/v1/messages"):
        return wire_anthropic.error_body
    return wire_openai.error_body if path.startswith(OPENAI_PATHS) else wire_stream.error_body


def service_of(request: Request) -> LiveService:
    return request.app.state.service


def refuse(service: LiveService, error: RequestError, envelope: Callable[[RequestError], dict]):
    service.metrics.refused(error.kind.status)
    return JSONResponse(envelope(error), error.kind.status, error.headers)


def event_stream(service: LiveService, reader: Reader, renderer, stream_id: str,
                 opening: bytes = b""):
    return EventStreamResponse(reader, renderer, service.settings.keepalive_s,
                               [(b"x-request-id", stream_id.encode())],
                               service.settings.event_padding, opening,
                               listen=service.settings.disconnect_notice == "listen")


def answer(service: LiveService, request: GenerationRequest, reader: Reader, renderer,
           stream_id: str, body: Callable[[str, Done], dict],
           envelope: Callable[[RequestError], dict]):
    if request.stream:
        return event_stream(service, reader, renderer, stream_id)
    return CollectedResponse(reader, body, envelope, {"X-Request-Id": stream_id})
