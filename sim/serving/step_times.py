"""When each step's events were delivered, by step index: an instant reader's token
times are runs of them (see `SimClient`). Only the steps a reader still reading
may yet ask for are kept, so a replay of tens of millions of steps holds about
as many as its longest stream spans."""
from __future__ import annotations

from typing import Callable, Iterable

FORGET_AT = 1 << 16
"""Steps held before the oldest that no reader needs are forgotten."""


class StepTimes:
    __slots__ = ("times", "first", "_forget_at")

    def __init__(self) -> None:
        self.times: list[float] = []
        """The times held, from step `first` on; appended to in place."""
        self.first = 0
        self._forget_at = FORGET_AT

    def __len__(self) -> int:
        """Steps delivered so far."""
        return self.first + len(self.times)

    def between(self, start: int, stop: int) -> list[float]:
        """The times of steps `start` to `stop` (not included)."""
        if start < self.first:
            raise IndexError(f"step {start} was forgotten (steps from {self.first} are held)")
        return self.times[start - self.first:stop - self.first]

    def forget_unneeded(self, oldest_needed: Callable[[], Iterable[int]]) -> None:
        """Forget the steps before the oldest that `oldest_needed` names (the first
        step of every run a reader still reading may ask for), once enough are held
        to make it worth a look; the next look waits until twice as many are held."""
        if len(self.times) < self._forget_at:
            return
        keep_from = min(oldest_needed(), default=len(self))
        del self.times[:keep_from - self.first]
        self.first = keep_from
        self._forget_at = max(FORGET_AT, 2 * len(self.times))
