"""OpenAI-compatible completions and chat completions, streaming and not, and the
models list.

Streams are `data:` lines of chunks ending with `data: [DONE]`; one chunk per token.
With `stream_options.include_usage` a last chunk with no choices carries the usage
(and every other chunk `"usage": null`); vLLM's `continuous_usage_stats` puts the
usage so far on every chunk. A stream that ends without finishing (shutdown, a
slow client, an engine failure) ends with an error object, then `[DONE]`."""
from __future__ import annotations

import json
import time

from scheduler import FinishReason
from scheduler.settings import ServeSettings

from ..streams.events import COMPLETED, Done, HubEvent, Start, Token
from .sse import KEEPALIVE, TokenTemplate, event_bytes
from .validation import (ErrorKind, GenerationRequest, RequestError, ServedModel, abort_error,
                         boolean, field, integer, invalid, obj, sampling, text_content)

COMPLETIONS_DEFAULT_MAX_TOKENS = 16
"""OpenAI's documented default for the legacy completions API."""

ERRORS = {  # kind: (type, code)
    ErrorKind.INVALID: ("invalid_request_error", None),
    ErrorKind.UNAUTHORIZED: ("invalid_request_error", "invalid_api_key"),
    ErrorKind.FORBIDDEN: ("invalid_request_error", "permission_denied"),
    ErrorKind.NOT_FOUND: ("invalid_request_error", "model_not_found"),
    ErrorKind.NOT_ALLOWED: ("invalid_request_error", "method_not_allowed"),
    ErrorKind.TIMEOUT: ("invalid_request_error", "request_timeout"),
    ErrorKind.CONFLICT: ("invalid_request_error", "request_id_in_use"),
    ErrorKind.GONE: ("invalid_request_error", "gone"),
    ErrorKind.TOO_LARGE: ("invalid_request_error", "request_too_large"),
    ErrorKind.TOO_LONG: ("invalid_request_error", "context_length_exceeded"),
    ErrorKind.QUEUE_FULL: ("rate_limit_error", "queue_full"),
    ErrorKind.KEY_LIMIT: ("rate_limit_error", "key_limit"),
    ErrorKind.ENGINE: ("server_error", "engine_error"),
    ErrorKind.UNAVAILABLE: ("server_error", "unavailable"),
}

CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def error_body(error: RequestError) -> dict:
    kind, code = ERRORS[error.kind]
    return {"error": {"message": error.message, "type": kind, "param": error.param, "code": code}}


def models_body(served: ServedModel, created: int) -> dict:
    return {"object": "list", "data": [model_card(served, created)]}


def model_card(served: ServedModel, created: int) -> dict:
    return {"id": served.name, "object": "model", "created": created, "owned_by": "twinstep",
            "max_model_len": served.max_model_len}


# -- requests ------------------------------------------------------------------

def _common(body: dict, served: ServedModel) -> tuple[bool, bool, bool]:
    served.check_name(body)
    integer(body, "n", 1, low=1, high=1)
    stream = boolean(body, "stream")
    options = obj(body, "stream_options")
    return (stream, boolean(options, "include_usage"),
            boolean(options, "continuous_usage_stats"))


def _one_prompt(prompt):
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        return prompt[0]  # a batch of one
    return prompt


def completion_tokenizes(body: dict) -> bool:
    """Whether `parse_completion` tokenizes a text prompt (otherwise it only checks ids)."""
    return isinstance(_one_prompt(body.get("prompt")), str)


def parse_completion(body: dict, served: ServedModel, settings: ServeSettings) -> GenerationRequest:
    stream, usage, continuous = _common(body, served)
    if boolean(body, "echo"):
        raise invalid("echo", "'echo' is not supported")
    prompt = _one_prompt(field(body, "prompt"))
    if isinstance(prompt, str):
        prompt_ids = served.encode(prompt)
        if not prompt_ids:
            raise invalid("prompt", "'prompt' is empty")
    elif isinstance(prompt, list):
        prompt_ids = served.token_ids(prompt, "prompt")
    else:
        raise invalid("prompt", "'prompt' must be a string or a list of token ids "
                                "(one prompt per request)")
    max_new = served.max_new_tokens(body, ("max_tokens",), len(prompt_ids),
                                    COMPLETIONS_DEFAULT_MAX_TOKENS)
    return GenerationRequest(prompt_ids, max_new,
                             sampling(body, served.vocab_size, settings, default_temperature=1.0),
                             stream, usage, continuous)


def parse_chat(body: dict, served: ServedModel, settings: ServeSettings) -> GenerationRequest:
    stream, usage, continuous = _common(body, served)
    if body.get("logprobs"):
        raise invalid("logprobs", "'logprobs' is not supported")
    messages = field(body, "messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "'messages' must be a non-empty list")
    turns = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(where, f"'{where}' must be an object")
        role = message.get("role")
        role = CHAT_ROLES.get(role) if isinstance(role, str) else None
        if role is None:
            raise invalid(f"{where}.role", f"'{where}.role' must be one of {sorted(CHAT_ROLES)}")
        turns.append({"role": role, "content": text_content(message.get("content"),
                                                            f"{where}.content")})
    prompt_ids = served.chat_prompt(turns)
    max_new = served.max_new_tokens(body, ("max_completion_tokens", "max_tokens"),
                                    len(prompt_ids), settings.default_max_tokens)
    return GenerationRequest(prompt_ids, max_new,
                             sampling(body, served.vocab_size, settings, default_temperature=1.0),
                             stream, usage, continuous)


# -- responses -----------------------------------------------------------------

def finish_reason(reason: FinishReason) -> str:
    return "length" if reason is FinishReason.LENGTH else "stop"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _data(value) -> bytes:
    return event_bytes(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


DONE = event_bytes("[DONE]")


class ChunkRenderer:
    """One stream as chunks: `chat` gives `chat.completion.chunk` deltas, otherwise
    `text_completion` texts."""

    keepalive = KEEPALIVE

    def __init__(self, chat: bool, response_id: str, model: str, request: GenerationRequest):
        self.chat = chat
        self.head = {"id": response_id,
                     "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": int(time.time()), "model": model}
        self.include_usage = request.include_usage
        self.continuous = request.continuous_usage
        self.prompt_tokens = 0
        self.completion_tokens = 0
        # with continuous usage each token's chunk counts the tokens so far
        self._token = None if self.continuous else TokenTemplate(self._chunk(TokenTemplate.MARK))

    def render(self, event: HubEvent) -> bytes:
        if type(event) is Token:
            self.completion_tokens += 1
            return self._chunk(event.text) if self._token is None else self._token(event.text)
        if isinstance(event, Start):
            self.prompt_tokens = event.prompt_tokens
            return self._chunk("", role=True) if self.chat else b""
        if isinstance(event, Done):
            return self._end(event)
        return b""  # a Failure: its Done says it

    def _end(self, done: Done) -> bytes:
        out = self._chunk(done.text) if done.text else b""
        if done.reason not in COMPLETED:
            return out + _data(error_body(abort_error(done.reason))) + DONE
        out += self._chunk(None, finish=finish_reason(done.reason))
        if self.include_usage:
            out += _data({**self.head, "choices": [],
                          "usage": usage(done.prompt_tokens, done.completion_tokens)})
        return out + DONE

    def _chunk(self, text: str | None, role: bool = False, finish: str | None = None) -> bytes:
        if self.chat:
            delta = {} if text is None else {"content": text}
            if role:
                delta = {"role": "assistant", **delta}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        chunk = {**self.head, "choices": [choice]}
        if self.continuous:
            chunk["usage"] = usage(self.prompt_tokens, self.completion_tokens)
        elif self.include_usage:
            chunk["usage"] = None
        return _data(chunk)


def completion_body(chat: bool, response_id: str, model: str, text: str, done: Done) -> dict:
    """The non-streaming answer; a stream that did not finish raises its error."""
    if done.reason not in COMPLETED:
        raise abort_error(done.reason)
    reason = finish_reason(done.reason)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
    return {"id": response_id, "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice],
            "usage": usage(done.prompt_tokens, done.completion_tokens)}
