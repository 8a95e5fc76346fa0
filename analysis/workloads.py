"""The calibration workload: requests chosen to cover what the cost model reads,
not to look like traffic. Solo requests of growing prompt length (prefill cost),
a burst of `max_batch` requests whose outputs end one after another (every decode
batch size from the limit down to 1), then Poisson arrivals (mixed steps)."""
from __future__ import annotations

from traces import TraceRequest
from traces.generate import generate
from traces.lengths import Uniform

SOLO_PROMPTS = (16, 64, 128, 256, 384, 512)


def calibration_workload(max_batch: int, seed: int = 0, solo_gap_s: float = 1.5,
                         mixed_count: int = 30, mixed_rate: float = 2.5) -> list[TraceRequest]:
    requests: list[TraceRequest] = []
    t = 0.0
    for i, prompt in enumerate(SOLO_PROMPTS):
        requests.append(TraceRequest(f"solo-{i}", t, prompt, 8))
        t += solo_gap_s
    for i in range(max_batch):
        prompt = 16 + (i * 97) % 240
        requests.append(TraceRequest(f"burst-{i}", t, prompt, 8 + (56 * i) // max(max_batch - 1, 1)))
    t += 8.0
    mixed = generate(rate=mixed_rate, count=mixed_count, prompt_lengths=Uniform(16, 384),
                     output_lengths=Uniform(16, 64), seed=seed)
    requests += [TraceRequest(f"mixed-{r.id}", t + r.arrival_s, r.prompt_tokens, r.max_new_tokens)
                 for r in mixed]
    return requests
