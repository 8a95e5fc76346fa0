"""Vidur request traces (Agrawal et al., MLSys 2024): CSV with
`arrived_at,num_prefill_tokens,num_decode_tokens` (arrival in seconds), or
length-only files with `num_prefill_tokens,num_decode_tokens`. A length-only file
gets its arrivals from the caller: a Poisson process at `rate` (seeded with the
`seed` option), or all at time 0 when no rate is given.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..synthetic.arrivals import arrival_times
from ..errors import TraceError
from ..record import TraceRequest
from ..shaping import shape
from .rows import PublicRow, csv_header, csv_rows, requests_from_rows, seconds, token_count

LENGTHS = ("num_prefill_tokens", "num_decode_tokens")
TIMED = ("arrived_at", *LENGTHS)


def load_vidur(path: str | Path, *, rate: float | None = None, **options) -> list[TraceRequest]:
    """Requests of a Vidur trace; `options` are those of `shape`."""
    source = Path(path).name
    timed = "arrived_at" in csv_header(path)
    if timed and rate is not None:
        raise TraceError(f"{source} has arrival times (arrived_at); rate applies only to "
                         "length-only files")
    if rate is not None and not rate > 0:
        raise TraceError(f"rate must be positive, got {rate}")
    rows = []
    for index, (line, cells) in enumerate(csv_rows(path, TIMED if timed else LENGTHS)):
        t = seconds(cells["arrived_at"], source, line, "arrived_at") if timed else 0.0
        rows.append(PublicRow(index, t,
                              token_count(cells["num_prefill_tokens"], source, line, "num_prefill_tokens"),
                              token_count(cells["num_decode_tokens"], source, line, "num_decode_tokens")))
    if rate is not None:
        # Only rows that become requests get an arrival, so the rate is the one asked
        # for; the arrivals draw from a stream of their own, apart from sampling's.
        rows = [r for r in rows if r.prompt_tokens > 0 and r.output_tokens > 0]
        rng = np.random.default_rng((options.get("seed", 0), 1))
        times = arrival_times(rate, count=len(rows), rng=rng) if rows else []
        rows = [PublicRow(r.index, float(t), r.prompt_tokens, r.output_tokens) for r, t in zip(rows, times)]
    return shape(requests_from_rows(rows), **options)
