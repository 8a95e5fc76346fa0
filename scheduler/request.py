"""Requests as the core sees them, and the sequence each becomes once submitted."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class FinishReason(enum.Enum):
    LENGTH = "length"
    STOP = "stop"
    EOS = "eos"
    CANCELLED = "cancelled"
    SLOW_CLIENT = "slow_client"
    ERROR = "error"


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class Request:
    """What a driver submits. `payload` is the driver's own (prompt ids, sampling,
    stop strings); the core never reads it."""

    id: str
    prompt_len: int
    max_new_tokens: int
    payload: Any = None
    key: str | None = None
    """The API key (its name) the request came with, for the per-key limits."""


@dataclass(slots=True, eq=False)
class Sequence:
    """A submitted request and everything the core tracks about it."""

    request: Request
    arrival: int
    state: SeqState = SeqState.WAITING
    reserved: int = 0
    block_table: list[int] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    num_tokens: int = 0
    """Prompt and output tokens so far; kept as a field because every step reads it."""
    finish_reason: FinishReason | None = None
    preemptions: int = 0
    recomputed_tokens: int = 0
    """Tokens prefilled again at its re-admissions after preemption."""
    prefill_left: int = 0
    """Tokens still to prefill before it makes a token: from admission (its prompt,
    and its output too when it is recomputed) until its last chunk is computed."""
    chunk: int = 0
    """Tokens the current step's plan prefills for it."""
    lost_tokens: int = 0
    """Tokens whose K/V its last preemption threw away: computed again when re-admitted."""
    overtaken: int = 0
    """Later requests admitted ahead of it while it did not fit, in its current wait."""
    emits_tokens: bool = True
    """Whether `commit` makes a `TokenEvent` for each of its tokens. A driver that can
    tell its tokens from the plans (one a step while it runs) turns it off, and saves
    an object a token; its finish is an event whatever this says."""

    def __post_init__(self):
        self.num_tokens = self.request.prompt_len + len(self.output)

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def prompt_len(self) -> int:
        return self.request.prompt_len

    @property
    def prefill_start(self) -> int:
        """Where the planned chunk begins: the tokens already in the cache."""
        return self.num_tokens - self.prefill_left

    @property
    def admitted(self) -> bool:
        return self.reserved > 0

    @property
    def last_token(self) -> int:
        return self.output[-1]
