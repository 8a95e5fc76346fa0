"""The calibration workload: requests chosen to cover what the cost model reads.
Solo requests of growing prompt length, up to the model's context (prefill
cost, and the server's overheads for one request); a burst of short requests sent
at once (how fast the server's front takes requests in); a ladder of decode batch
sizes from 1 to the largest the calibration prices (on a server it starts, twice
that server's limit: `calibrate.BATCH_REACH`), each size held for a dozen steps,
climbed three times with other work between (first, after the solo requests and
the burst, after the mixed arrivals: a shared host runs 20 to 35% slow for tens of
seconds at a time, and a size measured in one such stretch alone would take its
slowness for the size's cost); Poisson arrivals with some slow readers and
leavers, so that mixed steps are fitted while the server also streams to clients,
as in serving; then the server's own full batch for a few hundred steps, its
contexts growing token by token to what a busy server decodes, so that those are
measured rather than extrapolated (the cost of a context token grows once K and V
outgrow the caches: on a 2-core CPU, from 8 to 19 µs past about 4,000 tokens)."""
from __future__ import annotations

import math
from dataclasses import replace

from traces import ClientMix, LeaveHow, TraceRequest, Uniform, generate

SOLO_PROMPTS = (32, 128, 256, 512, 1024, 2048)
"""Up to the long prompts that traces such as Mooncake's and Azure's code trace
bring: attention's square term fitted on short prompts alone priced prefills of
1,024 to 2,048 tokens 10 to 27% above what they took."""
BURST = 16
"""Requests sent at once, to time the server's front in a burst."""
LADDER_TOKENS = 12
LONG_PROMPTS = (64, 192)
"""The long rung's prompts spread over this range: short enough that its prefill
is a step like serving's, not one of thousands of tokens."""
LONG_TOKENS = 256
"""What each request of the long rung generates (less where the model is shorter)."""
CHUNK_BUDGETS = (128, 64)
"""The chunks the calibration's chunk phase cuts prompts into, once at each size:
steps short enough to be serving's, most of each prompt read back from the cache by
the chunks after its first. At one size a chunk's own attention and its reading of
the prefix grow together and the fit cannot tell them apart: fitted on chunks of 128
alone, chunks of 64 were priced 5% above what they took."""
CHUNKED_PROMPTS = (272, 424, 584, 728, 880, 1000, 1560, 2040)
"""No length a multiple of a budget: each prompt's last chunk shares its step
with the next prompt's first, as two prompts' chunks do in serving (with lengths that
divide evenly, every chunk step held one chunk)."""


EVERY_SIZE_TO = 16
"""The ladder climbs every batch size up to this one: a CPU's matrix kernels favour
some row counts, so that batch 5 costs 9% over the line through 4 and 6, which no
size between two measured ones would show."""
LARGER_SIZES_APART = 1.4
"""Past `EVERY_SIZE_TO`, the most one size of the ladder is times the one before."""


def batch_ladder(top: int) -> list[int]:
    """Every size up to `EVERY_SIZE_TO`, then sizes evenly apart in ratio, at most
    `LARGER_SIZES_APART`, ending at `top`."""
    sizes = list(range(1, min(top, EVERY_SIZE_TO) + 1))
    if top > EVERY_SIZE_TO:
        climbs = math.ceil(math.log(top / EVERY_SIZE_TO) / math.log(LARGER_SIZES_APART))
        for k in range(1, climbs + 1):
            sizes.append(max(sizes[-1] + 1, round(EVERY_SIZE_TO * (top / EVERY_SIZE_TO) ** (k / climbs))))
    return sizes


def _rung_prompt(i: int) -> int:
    """The prompt of a rung's `i`th request: growing by 8 tokens up to `EVERY_SIZE_TO`
    requests, then again from the start, so that a larger rung's prefill grows with
    its size and not with its square."""
    return 24 + 8 * (i % EVERY_SIZE_TO)


def calibration_workload(max_batch: int, seed: int = 0, mixed_count: int = 48,
                         mixed_rate: float = 2.0, time_scale: float = 1.0,
                         max_model_len: int | None = None,
                         ladder_top: int | None = None) -> list[list[TraceRequest]]:
    """The workload in phases, each sent once the one before has drained (see
    `calibrate`), its arrivals from the phase's start: every rung of the ladder, each
    solo request, the burst, the mixed arrivals and the long contexts. A phase that
    waits for the last to drain holds its size on any host: at fixed times, a host
    a third slower than the one they were set for ran each rung into the next, and
    the solo requests into the last rung's decodes.

    `max_batch`: the batch the long contexts are decoded at; `ladder_top` (by
    default `max_batch`): the largest size of the ladder, which the server must
    batch. `time_scale` below 1 packs the mixed arrivals closer, for models faster
    than a 135M one on a CPU. Prompts are cut to fit `max_model_len` with their
    output."""
    def fitted(prompt: int, new_tokens: int) -> int:
        return prompt if max_model_len is None else max(1, min(prompt, max_model_len - new_tokens))

    def ladder(round_: int) -> list[list[TraceRequest]]:
        return [[TraceRequest(f"ladder-{round_}-{b}-{i}", 0.0, fitted(_rung_prompt(i), LADDER_TOKENS),
                              LADDER_TOKENS) for i in range(b)]
                for b in batch_ladder(ladder_top or max_batch)]

    solos = [[TraceRequest(f"solo-{i}", 0.0, fitted(prompt, 8), 8)]
             for i, prompt in enumerate(SOLO_PROMPTS)]
    burst = [TraceRequest(f"burst-{i}", 0.0, fitted(16, 4), 4) for i in range(BURST)]
    clients = ClientMix(slow=0.2, slow_pause_s=0.1, leave=0.1, leave_after_tokens=10,
                        leave_how=LeaveHow.FIN)
    mixed = [TraceRequest(f"mixed-{r.id}", r.arrival_s * time_scale,
                          fitted(r.prompt_tokens, r.max_new_tokens), r.max_new_tokens, client=r.client)
             for r in generate(rate=mixed_rate, count=mixed_count, prompt_lengths=Uniform(16, 384),
                               output_lengths=Uniform(16, 64), clients=clients, seed=seed)]
    low, high = LONG_PROMPTS
    new_tokens = LONG_TOKENS if max_model_len is None else min(LONG_TOKENS, max_model_len // 2)
    long = [TraceRequest(f"long-{i}", 0.0, fitted(low + (high - low) * i // max_batch, new_tokens),
                         new_tokens) for i in range(max_batch)]
    return [*ladder(0), *solos, burst, *ladder(1), mixed, *ladder(2), long]


def chunk_workload(max_batch: int, time_scale: float = 1.0,
                   max_model_len: int | None = None) -> list[TraceRequest]:
    """For a server that prefills in chunks (each of `CHUNK_BUDGETS` when the
    calibration starts them): a batch of short
    requests decoding while long prompts arrive one after another, so that chunks
    that begin a prompt and chunks that continue one over a growing prefix run
    beside decodes (on a server that prefills whole prompts, no step does this)."""
    decoders = max(1, min(8, max_batch // 2))
    requests = [TraceRequest(f"chunk-decode-{i}", 0.0, 32, 64) for i in range(decoders)]
    for i, prompt in enumerate(CHUNKED_PROMPTS):
        prompt = prompt if max_model_len is None else max(1, min(prompt, max_model_len - 8))
        requests.append(TraceRequest(f"chunk-prompt-{i}", 1.0 + 0.5 * i, prompt, 8))
    return [replace(r, arrival_s=r.arrival_s * time_scale) for r in requests]
