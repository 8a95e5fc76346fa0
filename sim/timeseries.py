"""The engine's state over time, one row per step (and per empty plan that changed
something): what the core holds and how many tokens the step made."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

COLUMNS = ("time_s", "running", "waiting", "paused", "blocks_reserved", "tokens")
DTYPE = np.dtype([(column, "f8" if column == "time_s" else "i8") for column in COLUMNS])


def _floats() -> array:
    return array("d")


def _counts() -> array:
    return array("q")


@dataclass
class TimeSeries:
    """Columns of machine numbers (8 bytes a value, not a Python object each): a
    replay of a million requests has tens of millions of steps."""

    time_s: array = field(default_factory=_floats)
    """When the step ended."""
    running: array = field(default_factory=_counts)
    waiting: array = field(default_factory=_counts)
    paused: array = field(default_factory=_counts)
    blocks_reserved: array = field(default_factory=_counts)
    tokens: array = field(default_factory=_counts)
    """Tokens the step made."""

    def record(self, time_s: float, running: int, waiting: int, paused: int,
               blocks_reserved: int, tokens: int) -> None:
        self.time_s.append(time_s)
        self.running.append(running)
        self.waiting.append(waiting)
        self.paused.append(paused)
        self.blocks_reserved.append(blocks_reserved)
        self.tokens.append(tokens)

    def peak(self, column: str) -> int:
        return max(getattr(self, column), default=0)

    def save(self, path: str | Path) -> None:
        """As one `.npy` array of records, a field a column (`np.load(path)["tokens"]`):
        a row a step, hundreds of thousands of them, written at once."""
        table = np.empty(len(self.time_s), dtype=DTYPE)
        for column in COLUMNS:
            table[column] = np.frombuffer(getattr(self, column), dtype=DTYPE[column])
        np.save(path, table)

    def rows(self) -> list[dict]:
        return [dict(zip(COLUMNS, row)) for row in zip(*(getattr(self, c) for c in COLUMNS))]
