"""Anthropic-compatible messages, streaming and not.

A stream is `message_start`, `content_block_start`, a `content_block_delta` per
token, `content_block_stop`, `message_delta` (stop reason, output tokens),
`message_stop`; `ping` events keep an idle stream alive. A stream that ends without
finishing ends with an `error` event."""
from __future__ import annotations

import json

from scheduler import FinishReason
from scheduler.settings import ServeSettings

from ..streams.events import COMPLETED, Done, HubEvent, Start, Token
from .sse import TokenTemplate, event_bytes
from .validation import (ErrorKind, GenerationRequest, RequestError, ServedModel, abort_error,
                         boolean, field, integer, invalid, sampling, text_content)

ERROR_TYPES = {
    ErrorKind.INVALID: "invalid_request_error",
    ErrorKind.UNAUTHORIZED: "authentication_error",
    ErrorKind.FORBIDDEN: "permission_error",
    ErrorKind.NOT_FOUND: "not_found_error",
    ErrorKind.NOT_ALLOWED: "invalid_request_error",
    ErrorKind.TIMEOUT: "timeout_error",
    ErrorKind.CONFLICT: "invalid_request_error",
    ErrorKind.GONE: "not_found_error",
    ErrorKind.TOO_LARGE: "request_too_large",
    ErrorKind.TOO_LONG: "invalid_request_error",
    ErrorKind.QUEUE_FULL: "rate_limit_error",
    ErrorKind.KEY_LIMIT: "rate_limit_error",
    ErrorKind.ENGINE: "api_error",
    ErrorKind.UNAVAILABLE: "overloaded_error",
}
STOP_REASONS = {FinishReason.EOS: "end_turn", FinishReason.STOP: "stop_sequence",
                FinishReason.LENGTH: "max_tokens"}


def error_body(error: RequestError) -> dict:
    return {"type": "error", "error": {"type": ERROR_TYPES[error.kind], "message": error.message}}


def parse_messages(body: dict, served: ServedModel,
                   settings: ServeSettings) -> tuple[GenerationRequest, tuple[str, ...]]:
    """The request and its stop sequences (a stop_sequence answer names the one hit)."""
    served.check_name(body)
    max_tokens = integer(body, "max_tokens", low=1)
    messages = field(body, "messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "'messages' must be a non-empty list")
    turns = []
    system = body.get("system")
    if system is not None:
        turns.append({"role": "system", "content": text_content(system, "system")})
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise invalid(f"{where}.role", f"'{where}.role' must be 'user' or 'assistant'")
        turns.append({"role": message["role"],
                      "content": text_content(message.get("content"), f"{where}.content")})
    params = sampling(body, served.vocab_size, settings, default_temperature=1.0,
                      stop_field="stop_sequences", temperature_max=1.0)
    request = GenerationRequest(served.chat_prompt(turns), max_tokens, params,
                                stream=boolean(body, "stream"))
    return request, params.stop


def stop_sequence(done: Done, stops: tuple[str, ...]) -> str | None:
    """The stop sequence that ended the answer, when it can be told: the engine
    reports that one was hit, not which."""
    return stops[0] if done.reason is FinishReason.STOP and len(stops) == 1 else None


def _event(name: str, data: dict) -> bytes:
    return event_bytes(json.dumps(data, ensure_ascii=False, separators=(",", ":")), name)


class MessageRenderer:
    keepalive = _event("ping", {"type": "ping"})

    def __init__(self, message_id: str, model: str, stops: tuple[str, ...]):
        self.message_id = message_id
        self.model = model
        self.stops = stops
        self._token = TokenTemplate(self._delta(TokenTemplate.MARK))

    def render(self, event: HubEvent) -> bytes:
        if type(event) is Token:
            return self._token(event.text)
        if isinstance(event, Start):
            message = {"id": self.message_id, "type": "message", "role": "assistant",
                       "content": [], "model": self.model, "stop_reason": None,
                       "stop_sequence": None,
                       "usage": {"input_tokens": event.prompt_tokens, "output_tokens": 0}}
            return (_event("message_start", {"type": "message_start", "message": message})
                    + _event("content_block_start", {"type": "content_block_start", "index": 0,
                                                     "content_block": {"type": "text", "text": ""}}))
        if isinstance(event, Done):
            return self._end(event)
        return b""  # a Failure: its Done says it

    def _delta(self, text: str) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": text}})

    def _end(self, done: Done) -> bytes:
        out = self._delta(done.text) if done.text else b""
        if done.reason not in COMPLETED:
            return out + _event("error", error_body(abort_error(done.reason)))
        delta = {"stop_reason": STOP_REASONS[done.reason],
                 "stop_sequence": stop_sequence(done, self.stops)}
        return (out + _event("content_block_stop", {"type": "content_block_stop", "index": 0})
                + _event("message_delta", {"type": "message_delta", "delta": delta,
                                           "usage": {"output_tokens": done.completion_tokens}})
                + _event("message_stop", {"type": "message_stop"}))


def message_body(message_id: str, model: str, text: str, done: Done,
                 stops: tuple[str, ...]) -> dict:
    """The non-streaming answer; a stream that did not finish raises its error."""
    if done.reason not in COMPLETED:
        raise abort_error(done.reason)
    return {"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": STOP_REASONS[done.reason],
            "stop_sequence": stop_sequence(done, stops),
            "usage": {"input_tokens": done.prompt_tokens, "output_tokens": done.completion_tokens}}
