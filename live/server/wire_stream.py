"""The project's own stream schema, `POST /v1/stream` and `GET /v1/stream/{id}`.

Request: `{"prompt": str | "prompt_tokens": [int], "max_new_tokens": int}` plus
optional `temperature` (default 0: greedy), `top_p`, `top_k`, `seed`, `stop`,
`ignore_eos`. Every event has `id: <request id>:<seq>`, seq counting the stream's
events from 0:

    event: start   {"id", "prompt_tokens"}
    event: token   {"index", "token_id", "text"}
    event: error   {"error": {"type", "message"}}        (only before a done "error")
    event: done    {"finish_reason", "usage": {"prompt_tokens", "completion_tokens"},
                    "timing": {"arrival", "admitted", "first_token", "finished"}}

`done` also has `"text"` when the detokenizer held text back to the end (a stop
string's unfinished prefix, an incomplete character)."""
from __future__ import annotations

import json
from json.encoder import encode_basestring

from scheduler.settings import ServeSettings

from ..streams.events import Done, Failure, HubEvent, Start, Token
from .sse import KEEPALIVE, event_bytes
from .validation import (ErrorKind, GenerationRequest, RequestError, ServedModel, integer,
                         invalid, sampling)

ERROR_TYPES = {
    ErrorKind.INVALID: "invalid_request",
    ErrorKind.UNAUTHORIZED: "unauthorized",
    ErrorKind.FORBIDDEN: "forbidden",
    ErrorKind.NOT_FOUND: "not_found",
    ErrorKind.NOT_ALLOWED: "method_not_allowed",
    ErrorKind.TIMEOUT: "request_timeout",
    ErrorKind.CONFLICT: "request_id_in_use",
    ErrorKind.GONE: "gone",
    ErrorKind.TOO_LARGE: "request_too_large",
    ErrorKind.TOO_LONG: "prompt_too_long",
    ErrorKind.QUEUE_FULL: "queue_full",
    ErrorKind.KEY_LIMIT: "key_limit",
    ErrorKind.ENGINE: "engine_error",
    ErrorKind.UNAVAILABLE: "unavailable",
}


def tokenizes(body: dict) -> bool:
    """Whether `parse` tokenizes a text prompt (otherwise it only checks ids)."""
    return body.get("prompt") is not None


def parse(body: dict, served: ServedModel, settings: ServeSettings) -> GenerationRequest:
    has_text, has_ids = body.get("prompt") is not None, body.get("prompt_tokens") is not None
    if has_text == has_ids:
        raise invalid("prompt", "give exactly one of 'prompt' (text) and 'prompt_tokens' (ids)")
    if has_text:
        if not isinstance(body["prompt"], str):
            raise invalid("prompt", "'prompt' must be a string")
        prompt_ids = served.encode(body["prompt"])
    else:
        prompt_ids = served.token_ids(body["prompt_tokens"], "prompt_tokens")
    return GenerationRequest(prompt_ids, integer(body, "max_new_tokens", low=1),
                             sampling(body, served.vocab_size, settings, default_temperature=0.0))


def error_body(error: RequestError) -> dict:
    return {"error": {"type": ERROR_TYPES[error.kind], "message": error.message,
                      "param": error.param}}


def last_event_seq(header: str | None, stream_id: str) -> int | None:
    """The seq in a `Last-Event-ID: <id>:<seq>` header (None when absent)."""
    if header is None or not header.strip():
        return None
    rid, sep, seq = header.strip().rpartition(":")
    if not sep or rid != stream_id or not (seq.isascii() and seq.isdigit() and len(seq) <= 20):
        raise RequestError(ErrorKind.INVALID, f"Last-Event-ID must be '{stream_id}:<seq>', "
                                              f"got {header[:80]!r}", "Last-Event-ID")
    return int(seq)


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class StreamRenderer:
    keepalive = KEEPALIVE

    def __init__(self, stream_id: str):
        self.stream_id = stream_id

    def render(self, event: HubEvent) -> bytes:
        if type(event) is Token:
            # what event_bytes makes of the token's JSON, without its line splitting
            return (f"id: {self.stream_id}:{event.seq}\nevent: token\ndata: {{\"index\":"
                    f"{event.index},\"token_id\":{event.token_id},\"text\":"
                    f"{encode_basestring(event.text)}}}\n\n").encode()
        eid = f"{self.stream_id}:{event.seq}"
        if isinstance(event, Start):
            return event_bytes(_json({"id": self.stream_id, "prompt_tokens": event.prompt_tokens}),
                               "start", eid)
        if isinstance(event, Failure):
            return event_bytes(_json({"error": {"type": "engine_error", "message": event.message}}),
                               "error", eid)
        return event_bytes(_json(done_data(event)), "done", eid)


def done_data(event: Done) -> dict:
    data = {"finish_reason": event.reason.value,
            "usage": {"prompt_tokens": event.prompt_tokens,
                      "completion_tokens": event.completion_tokens},
            "timing": event.timing.as_dict()}
    if event.text:
        data["text"] = event.text
    return data
