"""What a replay sends for one trace request: the `POST /v1/stream` body, with
token ids made up for a prompt the trace knows only by its length."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

from traces.record import TraceRequest


@dataclass(frozen=True, slots=True)
class PromptFiller:
    """Token ids for a prompt the trace knows only by its length: ids cycling over
    [low, high), starting at a place fixed by the request id, so a replay sends the
    same prompts every time and prompts differ from each other (no shared prefix
    for a prefix cache to exploit). The ids must be in the served model's vocab."""

    low: int = 1000
    high: int = 2000

    def __call__(self, request: TraceRequest) -> list[int]:
        span = self.high - self.low
        start = zlib.crc32(request.id.encode()) % span
        return [self.low + (start + i) % span for i in range(request.prompt_tokens)]


def request_body(request: TraceRequest, prompt_filler: Callable[[TraceRequest], list[int]]) -> dict:
    """The `POST /v1/stream` body for one trace request."""
    body: dict = {"max_new_tokens": request.max_new_tokens, "temperature": request.temperature,
                  "top_p": request.top_p, "top_k": request.top_k,
                  "ignore_eos": request.ignore_eos}
    if request.seed is not None:
        body["seed"] = request.seed
    if request.prompt is not None:
        body["prompt"] = request.prompt
    else:
        body["prompt_tokens"] = prompt_filler(request)
    return body
