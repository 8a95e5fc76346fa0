"""The calibration workload: requests chosen to cover what the cost model reads.
Solo requests of growing prompt length (prefill cost); a ladder of decode batch
sizes from 1 to the batch limit, each size held for a dozen steps; then Poisson
arrivals with some slow readers and leavers, so that mixed steps are fitted while
the server also streams to clients, as in serving."""
from __future__ import annotations

from dataclasses import replace

from traces import ClientMix, LeaveHow, TraceRequest, Uniform, generate

SOLO_PROMPTS = (32, 128, 256, 512)
LADDER_TOKENS = 12


def batch_ladder(max_batch: int) -> list[int]:
    """About eight sizes from 1 to `max_batch`, denser where batches are small."""
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b = max(b + 1, round(b * 1.4))
    return sizes + [max_batch]


def calibration_workload(max_batch: int, seed: int = 0, mixed_count: int = 48,
                         mixed_rate: float = 2.0, time_scale: float = 1.0) -> list[TraceRequest]:
    """`time_scale` below 1 packs the same requests closer, for models faster than
    a 135M one on a CPU."""
    requests: list[TraceRequest] = []
    t = 0.0
    for i, prompt in enumerate(SOLO_PROMPTS):
        requests.append(TraceRequest(f"solo-{i}", t, prompt, 8))
        t += 0.5 + prompt * 0.004  # room for its prefill and decodes on a slow CPU
    for b in batch_ladder(max_batch):
        requests += [TraceRequest(f"ladder-{b}-{i}", t, 24 + 8 * i, LADDER_TOKENS) for i in range(b)]
        t += 1.0 + 0.25 * b
    clients = ClientMix(slow=0.2, slow_pause_s=0.1, leave=0.1, leave_after_tokens=10,
                        leave_how=LeaveHow.FIN)
    mixed = generate(rate=mixed_rate, count=mixed_count, prompt_lengths=Uniform(16, 384),
                     output_lengths=Uniform(16, 64), clients=clients, seed=seed)
    requests += [TraceRequest(f"mixed-{r.id}", t + r.arrival_s, r.prompt_tokens, r.max_new_tokens,
                              client=r.client) for r in mixed]
    return [replace(r, arrival_s=r.arrival_s * time_scale) for r in requests]
