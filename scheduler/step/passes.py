"""How a step's prefills are cut into passes (`SchedulerConfig.prefill_pass_tokens`):
the live engine runs and delivers each pass on its own, the simulator prices each
one from the cost model; both cut here, so that they cut alike."""
from __future__ import annotations

from ..request import Sequence


def prefill_passes(prefills: list[Sequence], most_tokens: int | None) -> list[list[Sequence]]:
    """`prefills` (the chunks that end their prompt), in order, cut into passes of
    at most `most_tokens` prompt tokens each, a longer one in a pass of its own.
    The step's decodes and its other chunks go with the last pass. None or 0: one
    pass (also of no prefill at all)."""
    if not most_tokens or len(prefills) < 2:
        return [prefills]
    passes: list[list[Sequence]] = [[]]
    tokens = 0
    for seq in prefills:
        if tokens and tokens + seq.chunk > most_tokens:
            passes.append([])
            tokens = 0
        passes[-1].append(seq)
        tokens += seq.chunk
    return passes
