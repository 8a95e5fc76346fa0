"""Reading a request before anything is held: the body within its size limit, the
JSON object, each known field with its type and range, the prompt as token ids,
and the refusals all of it can give. The wire formats share this and differ only
in their field names and in the envelope an error is written in.

Unknown fields are ignored (clients send extensions); a known field that is null
counts as absent."""
from __future__ import annotations

import asyncio
import enum
import json
import math
from dataclasses import dataclass

from starlette.requests import ClientDisconnect, Request

from scheduler import FinishReason
from scheduler.settings import ServeSettings
from traces.names import REQUEST_ID

from ..runner.params import SEED_MAX, SEED_MIN, SamplingParams

_MISSING = object()


class ErrorKind(enum.Enum):
    """What went wrong, and the HTTP status each API answers it with."""

    INVALID = (400, "invalid")
    UNAUTHORIZED = (401, "unauthorized")
    FORBIDDEN = (403, "forbidden")
    NOT_FOUND = (404, "not_found")
    NOT_ALLOWED = (405, "not_allowed")
    TIMEOUT = (408, "timeout")
    CONFLICT = (409, "conflict")
    GONE = (410, "gone")
    TOO_LARGE = (413, "too_large")
    TOO_LONG = (422, "too_long")
    QUEUE_FULL = (429, "queue_full")
    KEY_LIMIT = (429, "key_limit")
    ENGINE = (500, "engine")
    UNAVAILABLE = (503, "unavailable")

    @property
    def status(self) -> int:
        return self.value[0]


class RequestError(Exception):
    def __init__(self, kind: ErrorKind, message: str, param: str | None = None,
                 retry_after_s: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        headers = {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}
        if self.kind is ErrorKind.TIMEOUT:  # the rest of the body must not be read as a request
            headers["Connection"] = "close"
        elif self.kind is ErrorKind.UNAUTHORIZED:
            headers["WWW-Authenticate"] = 'Bearer realm="twinstep"'
        return headers


def invalid(param: str, message: str) -> RequestError:
    return RequestError(ErrorKind.INVALID, message, param)


ABORT_MESSAGES = {
    FinishReason.CANCELLED: "the request was cancelled before it finished (server shutting down)",
    FinishReason.SLOW_CLIENT: "the client read too slowly and the stream was dropped",
    FinishReason.ERROR: "the engine failed while generating (see the server log)",
}


def abort_error(reason: FinishReason) -> RequestError:
    """How the APIs that have no finish reason for it report a stream that did not
    finish: as an error (in the stream, or as the status of a non-streaming answer)."""
    kind = ErrorKind.ENGINE if reason is FinishReason.ERROR else ErrorKind.UNAVAILABLE
    return RequestError(kind, ABORT_MESSAGES[reason])


# -- the headers -----------------------------------------------------------------

def request_id(request: Request) -> str | None:
    """The client's `X-Request-Id`, if it sent one: the id its stream will have."""
    value = request.headers.get("x-request-id")
    if value is not None and not REQUEST_ID.fullmatch(value):
        raise RequestError(ErrorKind.INVALID, "X-Request-Id must be 1 to 64 letters, digits, "
                                              f"'.', '_' or '-', got {value[:80]!r}", "X-Request-Id")
    return value


# -- the body --------------------------------------------------------------------

async def read_json(request: Request, limit: int, timeout_s: float) -> dict:
    """The body as a JSON object, read no further than `limit` bytes and for no
    longer than `timeout_s` (a client that sends slowly holds a connection)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() \
            and (len(declared) > 20 or int(declared) > limit):
        raise RequestError(ErrorKind.TOO_LARGE, f"the body is over the limit of {limit} bytes")
    try:
        async with asyncio.timeout(timeout_s):
            chunks = await _body(request, limit)
    except TimeoutError:
        raise RequestError(ErrorKind.TIMEOUT,
                           f"the body did not arrive within {timeout_s:g} s") from None
    except ClientDisconnect:  # nobody will read the answer; refuse quietly
        raise RequestError(ErrorKind.INVALID, "the client left before sending the body") from None
    try:
        body = json.loads(b"".join(chunks))
    except ValueError as exc:  # malformed, not UTF-8, or an integer of too many digits
        raise RequestError(ErrorKind.INVALID, f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise RequestError(ErrorKind.INVALID,
                           "the body is not valid JSON: nested too deep") from None
    if not isinstance(body, dict):
        raise RequestError(ErrorKind.INVALID, "the body must be a JSON object")
    return body


async def _body(request: Request, limit: int) -> list[bytes]:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(ErrorKind.TOO_LARGE, f"the body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return chunks


def _absent(body: dict, name: str, default) -> bool:
    """True when `name` is not given (or null) and has a default; a required field
    that is not given is refused."""
    if body.get(name) is not None:
        return False
    if default is _MISSING:
        raise invalid(name, f"'{name}' is required")
    return True


def field(body: dict, name: str, default=_MISSING):
    return default if _absent(body, name, default) else body[name]


def _out_of_range(name: str, value, low, high, low_open: bool = False) -> RequestError:
    lo = "(-∞" if low is None else f"({low}" if low_open else f"[{low}"
    hi = "∞)" if high is None else f"{high}]"
    return invalid(name, f"'{name}' must be in {lo}, {hi}, got {value}")


def integer(body: dict, name: str, default=_MISSING, low: int | None = None,
            high: int | None = None) -> int | None:
    if _absent(body, name, default):
        return default
    value = body[name]
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 16.0 from a client that only has floats
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"'{name}' must be an integer")
    if (low is not None and value < low) or (high is not None and value > high):
        raise _out_of_range(name, value, low, high)
    return value


def number(body: dict, name: str, default=_MISSING, low: float | None = None,
           high: float | None = None, low_open: bool = False) -> float | None:
    if _absent(body, name, default):
        return default
    value = body[name]
    # an int is compared as it is: a float of one of JSON's long integers overflows
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, float) and not math.isfinite(value)):
        raise invalid(name, f"'{name}' must be a number")
    below = low is not None and (value <= low if low_open else value < low)
    if below or (high is not None and value > high):
        raise _out_of_range(name, value, low, high, low_open)
    return float(value)


def boolean(body: dict, name: str, default: bool = False) -> bool:
    value = field(body, name, default)
    if not isinstance(value, bool):
        raise invalid(name, f"'{name}' must be true or false")
    return value


def string(body: dict, name: str, default=_MISSING) -> str | None:
    value = field(body, name, default)
    if value is not default and not isinstance(value, str):
        raise invalid(name, f"'{name}' must be a string")
    return value


def obj(body: dict, name: str) -> dict:
    value = field(body, name, {})
    if not isinstance(value, dict):
        raise invalid(name, f"'{name}' must be an object")
    return value


def stop_strings(body: dict, name: str, settings: ServeSettings) -> tuple[str, ...]:
    """A string or a list of strings, as many and as long as `settings` allow: each
    is matched against the text of every token the request makes."""
    value = body.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise invalid(name, f"'{name}' must be a string or a list of strings")
    if len(value) > settings.max_stop_strings:
        raise invalid(name, f"'{name}' may hold at most {settings.max_stop_strings} strings, "
                            f"got {len(value)}")
    if any(len(s) > settings.max_stop_chars for s in value):
        raise invalid(name, f"each of '{name}' may be at most {settings.max_stop_chars} "
                            "characters long")
    return tuple(s for s in value if s)


def sampling(body: dict, vocab_size: int, settings: ServeSettings, default_temperature: float,
             stop_field: str = "stop", temperature_max: float = 2.0) -> SamplingParams:
    top_k = integer(body, "top_k", 0, low=-1)
    return SamplingParams(
        temperature=number(body, "temperature", default_temperature, low=0.0, high=temperature_max),
        top_p=number(body, "top_p", 1.0, low=0.0, high=1.0, low_open=True),
        # vLLM's -1 means no cut, as 0 does here; so does a top_k the vocabulary cannot fill
        top_k=0 if top_k == -1 or top_k >= vocab_size else top_k,
        seed=integer(body, "seed", None, low=SEED_MIN, high=SEED_MAX),
        stop=stop_strings(body, stop_field, settings),
        ignore_eos=boolean(body, "ignore_eos"),
    )


# -- the model being served ---------------------------------------------------------

MAX_CHARS_PER_TOKEN = 64
"""More characters than any tokenizer puts in one token on average over a prompt:
a prompt longer than the context times this cannot fit, and is refused without
tokenizing it."""


@dataclass(frozen=True)
class ServedModel:
    name: str
    tokenizer: object
    max_model_len: int
    vocab_size: int

    def accepts(self, requested: str | None) -> bool:
        return requested is None or requested in (self.name, "default")

    def check_name(self, body: dict) -> None:
        requested = string(body, "model", None)
        if not self.accepts(requested):
            raise RequestError(ErrorKind.NOT_FOUND,
                               f"the model '{requested}' is not served here; "
                               f"this server serves '{self.name}'", "model")

    def encode(self, text: str) -> list[int]:
        self._check_chars(len(text), "prompt")
        return list(self.tokenizer.encode(text))

    def chat_prompt(self, messages: list[dict]) -> list[int]:
        """`messages` as `{"role", "content": str}`, through the model's chat template."""
        self._check_chars(sum(len(m["content"]) for m in messages), "messages")
        try:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                     tokenize=True)
        except Exception as exc:  # no template, or a template that refuses these messages
            raise invalid("messages", f"cannot apply the chat template: {exc}") from None
        # transformers 5 returns a BatchEncoding here; older versions a list
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def _check_chars(self, chars: int, param: str) -> None:
        if chars > self.max_model_len * MAX_CHARS_PER_TOKEN:
            raise RequestError(ErrorKind.TOO_LONG,
                               f"the prompt ({chars} characters) cannot fit the model's context "
                               f"of {self.max_model_len} tokens", param)

    def token_ids(self, value, param: str) -> list[int]:
        # `type(t) is int` leaves out bool; min and max then check the range in C, so
        # a long list costs about what decoding it from JSON did
        if (not isinstance(value, list) or not value
                or not all(type(t) is int for t in value)):
            raise invalid(param, f"'{param}' must be a non-empty list of token ids")
        if min(value) < 0 or max(value) >= self.vocab_size:
            bad = next(t for t in value if not 0 <= t < self.vocab_size)
            raise invalid(param, f"token id {bad} is outside the vocabulary (0 to "
                                 f"{self.vocab_size - 1})")
        return value

    def max_new_tokens(self, body: dict, names: tuple[str, ...], prompt_len: int,
                       default: int) -> int:
        """The first of `names` given; if none is, `default` capped by the context
        left after the prompt."""
        for name in names:
            if body.get(name) is not None:
                return integer(body, name, low=1)
        left = self.max_model_len - prompt_len
        if left < 1:
            raise RequestError(ErrorKind.TOO_LONG,
                               f"the prompt ({prompt_len} tokens) fills the model's context of "
                               f"{self.max_model_len}", names[0])
        return min(default, left)


def text_content(content, param: str) -> str:
    """Message content: a string, or a list of `{"type": "text", "text": ...}` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise invalid(param, f"'{param}' parts must be {{\"type\": \"text\", \"text\": ...}}; "
                                     "only text is supported")
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(param, f"'{param}' must be a string or a list of text parts")


@dataclass(frozen=True)
class GenerationRequest:
    """What every wire format's request comes down to."""

    prompt_ids: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    stream: bool = True
    include_usage: bool = False
    continuous_usage: bool = False
