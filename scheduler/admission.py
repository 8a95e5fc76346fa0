"""Admission policies: how many blocks a sequence must hold to be admitted, and
whether its hold grows as it writes (and may be taken back by preemption)."""
from __future__ import annotations

from typing import Protocol

from .block_pool import blocks_for
from .request import Sequence


class AdmissionPolicy(Protocol):
    name: str
    preempts: bool
    """False: a sequence holds every block it will write from admission on, and is
    never preempted. True: its hold grows a block at a time as it writes; when no
    block is free, the newest admitted sequence is preempted (its blocks released,
    back to the head of the queue, its tokens recomputed when re-admitted)."""

    def reservation(self, seq: Sequence, block_size: int) -> int:
        """Blocks to hold for `seq` when it is admitted."""

    def headroom(self, num_blocks: int) -> int:
        """Blocks that must stay free after an admission while others run."""


class ReserveWhole:
    """Reserve every block the request can ever need, so that a running sequence
    never waits for memory and is never preempted."""

    name = "reserve"
    preempts = False

    def reservation(self, seq: Sequence, block_size: int) -> int:
        return blocks_for(seq.prompt_len + seq.request.max_new_tokens, block_size)

    def headroom(self, num_blocks: int) -> int:
        return 0


class Optimistic:
    """vLLM's way: hold only the blocks of the tokens already there (the prompt, or
    prompt and output for a recomputed sequence) and take more as tokens are
    written. More sequences run at once on the same pool, at the price of
    recomputing the preempted ones."""

    name = "optimistic"
    preempts = True

    def __init__(self, watermark: float = 0.01):
        if not 0 <= watermark < 1:
            raise ValueError("watermark must be in [0, 1)")
        self.watermark = watermark
        """Share of the pool kept free at admission, so that the sequences already
        running can grow a while before one is preempted."""

    def reservation(self, seq: Sequence, block_size: int) -> int:
        return blocks_for(seq.num_tokens, block_size)

    def headroom(self, num_blocks: int) -> int:
        return int(self.watermark * num_blocks)


ADMISSION_POLICIES = {ReserveWhole.name: ReserveWhole, Optimistic.name: Optimistic}
