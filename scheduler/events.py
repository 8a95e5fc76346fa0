"""What a step tells its driver: tokens made and sequences finished."""
from __future__ import annotations

from typing import NamedTuple

from .request import FinishReason


class TokenEvent(NamedTuple):
    seq_id: str
    index: int
    token_id: int


class FinishEvent(NamedTuple):
    seq_id: str
    reason: FinishReason
    num_generated: int
    preemptions: int = 0
    """Times the sequence was preempted (optimistic admission)."""
    recomputed_tokens: int = 0
    """Tokens prefilled again when it was re-admitted after them."""


Event = TokenEvent | FinishEvent
