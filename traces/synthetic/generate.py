"""Synthetic traces: arrivals at a rate, lengths from distributions, a client mix,
all from one seed, so the same arguments always give the same trace."""
from __future__ import annotations

import numpy as np

from .arrivals import arrival_times
from .client_mix import ClientMix
from .lengths import Fixed, Lengths
from ..record import TraceRequest
from ..shaping import to_microsecond


def generate(
    *,
    rate: float,
    count: int | None = None,
    duration_s: float | None = None,
    cv: float = 1.0,
    prompt_lengths: Lengths = Fixed(64),
    output_lengths: Lengths = Fixed(64),
    clients: ClientMix = ClientMix(),
    seed: int = 0,
) -> list[TraceRequest]:
    """`count` requests, or those arriving in [0, duration_s), at a mean `rate` per
    second: a Poisson process at cv = 1, bursty above (see `arrival_times`). Prompts
    are token counts only (prompt=None); ids are "0", "1", ... in arrival order."""
    rng = np.random.default_rng(seed)
    times = arrival_times(rate, count=count, duration_s=duration_s, cv=cv, rng=rng)
    n = len(times)
    prompts = prompt_lengths.sample(n, rng)
    outputs = output_lengths.sample(n, rng)
    mix = clients.assign(n, rng)
    return [TraceRequest(id=str(i), arrival_s=to_microsecond(float(times[i])),
                         prompt_tokens=int(prompts[i]), max_new_tokens=int(outputs[i]), client=mix[i])
            for i in range(n)]
