"""What happened to one request in a replay, live or simulated: the one schema
both write, so the analysis compares like with like. Times are seconds from the
replay's start."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Refusal(StrEnum):
    """Why a request was refused before its stream began, in one vocabulary for the
    live client (from the HTTP status) and the simulator (from the core's refusal)."""

    QUEUE_FULL = "queue_full"
    """429: the waiting queue is full."""
    KEY_LIMIT = "key_limit"
    """429: the request's key holds as many streams or waiting requests as its limit allows."""
    TOO_LARGE = "too_large"
    """422: longer than the model's context or the block pool."""
    INVALID = "invalid"
    """400, 401, 403, 404, 409, 413: the request itself is wrong (its key too)."""
    UNAVAILABLE = "unavailable"
    """503: the server is shutting down or its engine has stopped."""
    SERVER_ERROR = "server_error"
    """Any other status: the server failed."""
    UNREACHABLE = "unreachable"
    """No connection (live only)."""


@dataclass(slots=True)
class RequestOutcome:
    id: str
    arrival_s: float
    prompt_tokens: int
    max_new_tokens: int
    admitted_s: float | None = None
    first_token_engine_s: float | None = None
    """When the engine made the first token (end of its prefill step)."""
    headers_s: float | None = None
    """When the client received the response headers; None when none came."""
    first_token_client_s: float | None = None
    """When the client received the first token event."""
    token_times_s: list[float] = field(default_factory=list)
    """When the client received each token event it read."""
    finish_s: float | None = None
    finish_reason: str | None = None
    tokens_generated: int = 0
    tokens_read: int = 0
    tokens_after_leave: int = 0
    """Tokens the engine made after the client had left: wasted work."""
    left_s: float | None = None
    refused: str | None = None
    """A `Refusal` value, if the request was refused before its stream began."""

    @property
    def ttft_client_s(self) -> float | None:
        if self.first_token_client_s is None:
            return None
        return self.first_token_client_s - self.arrival_s

    @property
    def ttft_engine_s(self) -> float | None:
        if self.first_token_engine_s is None:
            return None
        return self.first_token_engine_s - self.arrival_s

    @property
    def gaps_s(self) -> list[float]:
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:])]


def write_outcomes(path: str | Path, outcomes: list[RequestOutcome]) -> None:
    with open(path, "w") as f:
        for o in outcomes:
            # A shallow dict: asdict would copy every token time first.
            f.write(json.dumps({name: getattr(o, name) for name in o.__slots__}) + "\n")


def read_outcomes(path: str | Path) -> list[RequestOutcome]:
    """Records written by `write_outcomes`; a field added since a file was written
    takes its default."""
    with open(path) as f:
        return [RequestOutcome(**json.loads(line)) for line in f if line.strip()]
