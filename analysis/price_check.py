"""The price check: a short fixed load against a live server, its steps' seconds
over a profile's price of the very same steps, the host's pace now (1.04: four
per cent slower than when the profile was fitted). A shared host's speed drifts by
more than a what-if's effect over an hour; a check takes seconds, reads nothing of
the workload being judged, and tells the simulator how fast the host runs today.

The load has prompts of several lengths arriving while others decode, so that
its steps are of every kind the profile prices (whole prompts, several together,
prompts beside decodes, decodes alone), and it fits the smallest pool the matrix
runs without a preemption."""
from __future__ import annotations

import secrets

from live.client.loadgen import replay as live_replay
from traces import TraceRequest

from .live_target import LiveTarget

PROMPT_TOKENS = (24, 160, 48, 320, 96, 256, 64, 128)
NEW_TOKENS = 24
ARRIVAL_GAP_S = 0.25
"""Two requests at a time, a quarter second apart: 1,096 prompt and 192 new tokens,
about six seconds of the embedded model on two CPU cores."""


def load(max_model_len: int) -> list[TraceRequest]:
    """The check's requests, each prompt cut to fit `max_model_len`."""
    return [TraceRequest(id=str(i), arrival_s=ARRIVAL_GAP_S * (i // 2),
                         prompt_tokens=min(n, max_model_len - NEW_TOKENS),
                         max_new_tokens=NEW_TOKENS)
            for i, n in enumerate(PROMPT_TOKENS)]


def price_check(target: LiveTarget, max_model_len: int) -> list[dict]:
    """The steps of one check against `target`: their `pace` against the profile is
    the host's now."""
    mark = target.last_step()
    result = live_replay(target.url, load(max_model_len),
                         request_id_prefix=f"price-check-{secrets.token_hex(4)}-",
                         **target.access.replay_options())
    unfinished = [o for o in result.outcomes if o.refused or o.finish_reason != "length"]
    if unfinished:
        # a check cut short is a different load: its pace would not compare
        raise RuntimeError(f"the price check against {target.url} did not run to its end: "
                           + ", ".join(f"request {o.id} {o.refused or o.finish_reason}"
                                       for o in unfinished))
    return target.steps_after(mark)
