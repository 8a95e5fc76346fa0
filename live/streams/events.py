"""What a stream carries, in order: `Start`, a `Token` per token, a `Failure` if
the engine failed it, and a `Done` that ends it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from scheduler import FinishReason

COMPLETED = (FinishReason.LENGTH, FinishReason.STOP, FinishReason.EOS)


@dataclass(frozen=True, slots=True)
class Start:
    seq: int
    prompt_tokens: int
    terminal: ClassVar[bool] = False


@dataclass(slots=True)  # not frozen: made for every token, and a frozen one's __init__ costs 4x
class Token:
    seq: int
    index: int
    token_id: int
    text: str
    terminal: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Failure:
    """The engine failed this stream; a `Done` with reason `error` follows."""

    seq: int
    message: str
    terminal: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Timing:
    """Unix seconds, taken when the engine's events reached the hub."""

    arrival: float
    admitted: float | None
    first_token: float | None
    finished: float

    def as_dict(self) -> dict:
        return {"arrival": self.arrival, "admitted": self.admitted,
                "first_token": self.first_token, "finished": self.finished}


@dataclass(frozen=True, slots=True)
class Done:
    seq: int
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    text: str
    """Text the detokenizer held back to the end (an unfinished stop-string prefix)."""
    timing: Timing
    terminal: ClassVar[bool] = True


HubEvent = Start | Token | Failure | Done


def wire_size(event: HubEvent) -> int:
    """About what an event costs on the wire: ids and field names, plus its text."""
    return 64 + len(event.text) if isinstance(event, (Token, Done)) else 64
