"""Every finished request as the server saw it, which its client cannot know: when
the engine admitted it and made its first token, how many tokens it made, how many
of them after the client had left (wasted work), and how often it was preempted and
recomputed, and the key it came with. Kept in a ring that `GET /v1/requests` pages through, numbered in the
order requests finished."""
from __future__ import annotations

from scheduler import FinishEvent

from ..engine.record_ring import RecordRing
from .stream import Stream

DEFAULT_RING = 100_000
"""Finished requests kept: a few hundred bytes each."""

FIELDS = ("n", "id", "prompt_tokens", "arrival_unix", "admitted_unix", "first_token_unix",
          "finish_unix", "finish_reason", "completion_tokens", "tokens_after_leave", "left_unix",
          "preemptions", "recomputed_tokens", "key")


class RequestLog:
    def __init__(self, ring_size: int = DEFAULT_RING):
        self._ring = RecordRing(ring_size, "requests")

    @property
    def ring_size(self) -> int:
        return self._ring.size

    @property
    def last(self) -> int:
        """The number of the request that finished last; 0 before the first."""
        return self._ring.last

    def record(self, stream: Stream, finish: FinishEvent, finished_unix: float) -> None:
        self._ring.append((self._ring.last + 1, stream.id, stream.prompt_tokens, stream.arrival,
                           stream.admitted, stream.first_token, finished_unix,
                           finish.reason.value, finish.num_generated,
                           stream.tokens_after_leave, stream.left_unix, finish.preemptions,
                           finish.recomputed_tokens, stream.key))

    def after(self, n: int, limit: int | None = None) -> list[dict]:
        """The records of the requests that finished after the `n`th, oldest first,
        at most `limit`; raises `RecordsLost` if some are no longer kept."""
        return [dict(zip(FIELDS, entry)) for entry in self._ring.after(n, limit)]
