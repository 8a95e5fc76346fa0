"""Exact percentiles of more values than memory should hold: the pooled
inter-token gaps of a replay of a million requests are hundreds of millions of
floats. Up to a bound the values stay in memory; past it they go to a temporary
file, and each percentile's order statistics are found by passes over the file,
one digit of the values' sortable bit pattern a pass, in memory of the bound.
The answer is numpy's `percentile` (its default, linear method) to the bit."""
from __future__ import annotations

import tempfile
from array import array
from typing import BinaryIO, Iterable

import numpy as np

IN_MEMORY = 1 << 22
"""Values held in memory (32 MiB) before they go to the file."""

READ_CHUNK = 1 << 20
"""Values read back from the file at a time: a pass holds a few arrays of this many."""

DIGIT_BITS = 16
"""Bits of the sortable key a pass resolves: four passes find any float64."""

_SIGN = np.uint64(1 << 63)


class Percentiles:
    """Finite values added one at a time or as arrays, in any order; their
    percentiles once all are in. Close it (or use it in a `with`) to remove its file."""

    def __init__(self, in_memory: int = IN_MEMORY) -> None:
        self.in_memory = in_memory
        self._values = array("d")
        self._file: BinaryIO | None = None
        self._spilled = 0

    def add(self, value: float) -> None:
        self._values.append(value)
        if len(self._values) >= self.in_memory:
            self._spill()

    def extend(self, values: np.ndarray) -> None:
        """Float64 values, as one array."""
        self._values.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        if len(self._values) >= self.in_memory:
            self._spill()

    def __len__(self) -> int:
        return self._spilled + len(self._values)

    def percentiles(self, qs: Iterable[float]) -> list[float | None]:
        """The `qs` percentiles (0 to 100); None for each when no value was added."""
        qs = list(qs)
        n = len(self)
        if n == 0:
            return [None] * len(qs)
        if self._file is None:
            return [float(v) for v in np.percentile(np.frombuffer(self._values), qs)]
        self._spill()
        # numpy's linear method: the value at (n - 1) * q, between its two neighbours
        positions = [(n - 1) * (q / 100) for q in qs]
        below = [min(int(p), n - 1) for p in positions]
        ranks = sorted({r for b in below for r in (b, min(b + 1, n - 1))})
        value = dict(zip(ranks, self._select(ranks)))
        return [_between(value[b], value[min(b + 1, n - 1)], p - b) if p < n - 1 else value[n - 1]
                for p, b in zip(positions, below)]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Percentiles:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile()
        self._file.write(self._values.tobytes())
        self._spilled += len(self._values)
        self._values = array("d")

    def _chunks(self) -> Iterable[np.ndarray]:
        """The values' sortable keys, a chunk at a time."""
        self._file.seek(0)
        while True:
            chunk = np.fromfile(self._file, dtype=np.uint64, count=min(self.in_memory, READ_CHUNK))
            if not len(chunk):
                return
            yield _sortable(chunk)

    def _select(self, ranks: list[int]) -> list[float]:
        """The values of the given ranks (0-based, in sorted order), one digit of
        their keys a pass: each pass counts, among the values that share a rank's
        digits found so far, how many take each value of the next digit."""
        found = [(0, rank) for rank in ranks]  # (key digits so far, rank among those)
        for done in range(0, 64, DIGIT_BITS):
            shift = np.uint64(64 - done - DIGIT_BITS)
            prefixes = sorted({prefix for prefix, _ in found})
            counts = {prefix: np.zeros(1 << DIGIT_BITS, dtype=np.int64) for prefix in prefixes}
            for keys in self._chunks():
                for prefix in prefixes:
                    within = keys if not done else keys[(keys >> np.uint64(64 - done)) == prefix]
                    digits = ((within >> shift) & np.uint64((1 << DIGIT_BITS) - 1)).astype(np.int64)
                    counts[prefix] += np.bincount(digits, minlength=1 << DIGIT_BITS)
            narrowed = []
            for prefix, rank in found:
                ends = np.cumsum(counts[prefix])
                digit = int(np.searchsorted(ends, rank, side="right"))
                before = int(ends[digit - 1]) if digit else 0
                narrowed.append(((prefix << DIGIT_BITS) | digit, rank - before))
            found = narrowed
        return [float(_unsortable(np.array([key], dtype=np.uint64))[0]) for key, _ in found]


def _sortable(bits: np.ndarray) -> np.ndarray:
    """Float64 bit patterns as keys in the floats' order: negative floats flipped
    whole, positive ones with the sign bit set."""
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def _unsortable(keys: np.ndarray) -> np.ndarray:
    return np.where(keys & _SIGN, keys & ~_SIGN, ~keys).view(np.float64)


def _between(low: float, high: float, t: float) -> float:
    """Linear interpolation as numpy's percentile does it, from whichever end is
    nearer, so that the result is the same float."""
    d = high - low
    return high - d * (1 - t) if t >= 0.5 else low + d * t
