"""What one engine step hands on: the core's events, and the text the engine made
of them."""
from __future__ import annotations

from dataclasses import dataclass

from scheduler import Event, TokenEvent


@dataclass(frozen=True, slots=True)
class StepOutput:
    events: list[Event]
    """The core's `TokenEvent`s and `FinishEvent`s, in the core's order."""
    deltas: dict[str, str]
    """The text each sequence's token of this step adds (empty while held back)."""
    held: dict[str, str]
    """For each sequence finished in this step, the text held back to its end (an
    unfinished stop-string prefix)."""
    admitted: list[str]
    """Sequences admitted for the first time: their prefill starts in this step (and
    with chunked prefill may end several steps later, with their first token)."""
    started: float
    """Unix seconds, when the step began."""

    @property
    def is_empty(self) -> bool:
        return not self.events and not self.admitted

    def __reduce__(self):
        # to an engine process's server, the tokens as plain tuples: a named tuple
        # pickles by its class, at a microsecond or two a token on each side
        rows = [tuple(e) if type(e) is TokenEvent else e for e in self.events]
        return _unpacked, (rows, self.deltas, self.held, self.admitted, self.started)


def _unpacked(rows: list, deltas: dict[str, str], held: dict[str, str], admitted: list[str],
              started: float) -> StepOutput:
    token = tuple.__new__
    events = [token(TokenEvent, e) if type(e) is tuple else e for e in rows]
    return StepOutput(events, deltas, held, admitted, started)
