"""The engine's state over time, one row per step (and per empty plan that changed
something): what the core holds and how many tokens the step made."""
from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import BinaryIO

import numpy as np

COLUMNS = ("time_s", "running", "waiting", "paused", "blocks_reserved", "tokens")
DTYPE = np.dtype([(column, "f8" if column == "time_s" else "i8") for column in COLUMNS])

CHUNK_ROWS = 1 << 16
"""Rows a series not kept in memory holds before it tallies them (and writes them)."""


class TimeSeries:
    """Columns of machine numbers (8 bytes a value, not a Python object each): a
    replay of a million requests has tens of millions of steps. By default every
    row stays in memory; `TimeSeries.written(path)` writes them to a `.npy` file as
    they come and `TimeSeries.tallied()` keeps none, both holding at most
    `CHUNK_ROWS` rows and keeping each column's peak and total as they go."""

    def __init__(self) -> None:
        self.time_s = array("d")
        """When the step ended."""
        self.running = array("q")
        self.waiting = array("q")
        self.paused = array("q")
        self.blocks_reserved = array("q")
        self.tokens = array("q")
        """Tokens the step made."""
        self._hold = math.inf
        self._rows: BinaryIO | None = None
        self._flushed = 0
        self._peaks = dict.fromkeys(COLUMNS[1:], 0)
        self._tokens = 0

    @classmethod
    def written(cls, path: str | Path) -> TimeSeries:
        """Rows go to `path`, one `.npy` array of records, a field a column
        (`np.load(path)["tokens"]`), as they come; `close` finishes it."""
        series = cls.tallied()
        series._rows = open(path, "wb")
        series._write_header()
        return series

    @classmethod
    def tallied(cls) -> TimeSeries:
        """Only peaks and totals are kept."""
        series = cls()
        series._hold = CHUNK_ROWS
        return series

    def record(self, time_s: float, running: int, waiting: int, paused: int,
               blocks_reserved: int, tokens: int) -> None:
        self.time_s.append(time_s)
        self.running.append(running)
        self.waiting.append(waiting)
        self.paused.append(paused)
        self.blocks_reserved.append(blocks_reserved)
        self.tokens.append(tokens)
        if len(self.tokens) >= self._hold:
            self._flush()

    def __len__(self) -> int:
        return self._flushed + len(self.tokens)

    def peak(self, column: str) -> int:
        return max(self._peaks[column], max(getattr(self, column), default=0))

    def tokens_made(self) -> int:
        """Every token the engine made."""
        return self._tokens + sum(self.tokens)

    def close(self) -> None:
        """A written series: the rows still held go out, and the header takes
        their count."""
        if self._rows is None:
            return
        self._flush()
        self._rows.seek(0)
        self._write_header()
        self._rows.close()
        self._rows = None

    def _write_header(self) -> None:
        """numpy leaves room in a header for the count to grow to any size, so the
        final one is written over the first, to the same length."""
        np.lib.format.write_array_header_1_0(self._rows, {
            "descr": np.lib.format.dtype_to_descr(DTYPE), "fortran_order": False,
            "shape": (self._flushed,)})

    def rows(self) -> list[dict]:
        """The rows held in memory (all of them, by default)."""
        return [dict(zip(COLUMNS, row)) for row in zip(*(getattr(self, c) for c in COLUMNS))]

    def _table(self) -> np.ndarray:
        table = np.empty(len(self.tokens), dtype=DTYPE)
        for column in COLUMNS:
            table[column] = np.frombuffer(getattr(self, column), dtype=DTYPE[column])
        return table

    def _flush(self) -> None:
        for column in self._peaks:
            self._peaks[column] = self.peak(column)
        self._tokens += sum(self.tokens)
        if self._rows is not None:
            self._table().tofile(self._rows)
        self._flushed += len(self.tokens)
        for column in COLUMNS:
            del getattr(self, column)[:]
