"""Cut a trace down to what a replay needs: a time window, a sample, the first N,
faster or slower arrivals, and lengths a small model can serve. Every loader takes
these options; they apply to any list of requests, native traces included. Public
traces name no client, so `assign_keys` gives their requests API keys with a few
heavy users, for what-ifs on per-key limits."""
from __future__ import annotations

import dataclasses

import numpy as np

from .errors import TraceError
from .record import TraceRequest


def to_microsecond(t: float) -> float:
    """Arrival times are kept to the microsecond: finer is noise to a replay, and
    the written files stay readable."""
    return round(t, 6)


def _check_options(time_scale, start_s, end_s, limit, sample, max_prompt_tokens, max_new_tokens):
    if not time_scale > 0:
        raise TraceError(f"time_scale must be positive, got {time_scale}")
    if start_s is not None and start_s < 0:
        raise TraceError(f"start_s must be >= 0, got {start_s}")
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise TraceError(f"end_s ({end_s}) must be after start_s ({start_s})")
    if limit is not None and limit < 1:
        raise TraceError(f"limit must be a positive number of requests, got {limit}")
    if sample is not None and not 0 < sample <= 1:
        raise TraceError(f"sample must be a fraction in (0, 1], got {sample}")
    for name, cap in (("max_prompt_tokens", max_prompt_tokens), ("max_new_tokens", max_new_tokens)):
        if cap is not None and cap < 1:
            raise TraceError(f"{name} must be a positive number of tokens, got {cap}")


def shape(
    requests: list[TraceRequest],
    *,
    time_scale: float = 1.0,
    start_s: float | None = None,
    end_s: float | None = None,
    limit: int | None = None,
    sample: float | None = None,
    seed: int = 0,
    max_prompt_tokens: int | None = None,
    max_new_tokens: int | None = None,
) -> list[TraceRequest]:
    """Applied in this order:

    1. window: keep arrivals in [start_s, end_s), in the trace's own seconds;
    2. sample: keep round(sample * n) requests chosen at random (seeded), in order;
    3. limit: keep the first `limit`;
    4. time: arrival becomes (arrival - start_s) * time_scale, so the window starts
       at 0 and time_scale 0.5 replays twice as fast;
    5. caps: prompt_tokens and max_new_tokens are clamped to the caps (clamped, not
       dropped, so the arrival pattern stays whole).
    """
    _check_options(time_scale, start_s, end_s, limit, sample, max_prompt_tokens, max_new_tokens)
    kept = [r for r in requests
            if (start_s is None or r.arrival_s >= start_s) and (end_s is None or r.arrival_s < end_s)]
    if sample is not None:
        rng = np.random.default_rng(seed)
        chosen = rng.choice(len(kept), size=round(sample * len(kept)), replace=False)
        kept = [kept[i] for i in sorted(chosen)]
    if limit is not None:
        kept = kept[:limit]
    origin = start_s or 0.0
    if origin or time_scale != 1.0:
        kept = [dataclasses.replace(r, arrival_s=to_microsecond((r.arrival_s - origin) * time_scale))
                for r in kept]
    if max_prompt_tokens is not None or max_new_tokens is not None:
        kept = [dataclasses.replace(
            r,
            prompt_tokens=min(r.prompt_tokens, max_prompt_tokens or r.prompt_tokens),
            max_new_tokens=min(r.max_new_tokens, max_new_tokens or r.max_new_tokens),
        ) for r in kept]
    return kept


_KEY_STREAM = 1
"""Keys are drawn from their own stream of the seed, apart from what else the same
seed draws (a generated trace's arrivals and lengths, a sample)."""


def assign_keys(requests: list[TraceRequest], keys: int, skew: float = 1.0,
                seed: int = 0) -> list[TraceRequest]:
    """Each request gets the key `key-<i>`, i in [0, keys) drawn at random (seeded)
    with weight 1 / (i + 1) ** skew: Zipf-like, so key-0 sends the most and a few
    keys carry most requests when skew is about 1 or more; skew 0 spreads them
    evenly. What else a request holds is kept."""
    if keys < 1:
        raise TraceError(f"keys must be a positive number of keys, got {keys}")
    if not 0 <= skew < float("inf"):
        raise TraceError(f"key skew must be a number >= 0, got {skew}")
    weights = 1.0 / np.arange(1, keys + 1) ** skew
    rng = np.random.default_rng([seed, _KEY_STREAM])
    drawn = rng.choice(keys, size=len(requests), p=weights / weights.sum())
    return [dataclasses.replace(r, key=f"key-{i}") for r, i in zip(requests, drawn)]
