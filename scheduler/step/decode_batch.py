"""The decode batch of a step: every running, unpaused sequence that has made a
token, in admission order, and the context it holds. Each block table grows to hold
the token the step writes; under a preempting admission policy a table may grow
beyond its reservation, and newer sequences are preempted for the blocks.

The batch is kept from step to step: until a sequence joins, leaves, pauses or
resumes, the next batch is the last one with a token more each, and only the
tables that commit found full need to grow."""
from __future__ import annotations

from typing import Callable

from ..block_pool import BlockPool, blocks_for
from ..request import Sequence, SeqState


class DecodeBatch:
    __slots__ = ("running", "pool", "block_size", "preempts", "preempt", "seqs", "context",
                 "full")

    def __init__(self, running: dict[str, Sequence], pool: BlockPool, block_size: int,
                 preempts: bool, preempt: Callable[[Sequence], None]):
        self.running = running
        """The admitted sequences in admission order: read here, changed by the core."""
        self.pool = pool
        self.block_size = block_size
        self.preempts = preempts
        self.preempt = preempt
        """Takes a sequence's blocks back and puts it at the head of the queue."""
        self.seqs: list[Sequence] | None = None
        """The last batch, while it still holds."""
        self.context = 0
        """The context the last batch holds; commit adds the tokens it writes."""
        self.full: list[Sequence] = []
        """Sequences of the batch whose block table is full: their next token needs
        a block. Commit adds them."""

    def changed(self) -> None:
        """A sequence has joined, left, paused or resumed: the next batch is built anew."""
        self.seqs = None

    def plan(self) -> tuple[list[Sequence], int]:
        """This step's decodes and their context, every block table grown for the
        token it writes."""
        full, pool, preempts = self.full, self.pool, self.preempts
        if self.seqs is not None and (not full or self._room_for(full)):
            for seq in full:
                if preempts:
                    self._extend(seq)
                pool.grow(seq.id, seq.num_tokens)
            full.clear()
            return list(self.seqs), self.context
        full.clear()
        batch, context = [], 0
        bs, running = self.block_size, SeqState.RUNNING
        # a copy only where preemption may take sequences out while it runs
        for seq in list(self.running.values()) if preempts else self.running.values():
            if seq.state is not running or seq.prefill_left:
                continue  # paused, not prefilled yet, or just preempted for an older one
            n = seq.num_tokens
            if n > len(seq.block_table) * bs:
                if preempts:
                    if not self._make_room(seq):
                        continue
                    self._extend(seq)
                pool.grow(seq.id, n)
            batch.append(seq)
            context += n
        self.seqs, self.context = batch, context
        return list(batch), context

    def _room_for(self, seqs: list[Sequence]) -> bool:
        """Whether the blocks these sequences' next tokens need are held or free."""
        return not self.preempts or self.pool.can_reserve(sum(map(self._blocks_short, seqs)))

    def _blocks_short(self, seq: Sequence) -> int:
        """Blocks `seq` must take beyond its reservation to write its next token."""
        return max(0, blocks_for(seq.num_tokens, self.block_size) - seq.reserved)

    def _extend(self, seq: Sequence) -> None:
        """Hold the blocks `seq`'s next token needs beyond its reservation."""
        need = self._blocks_short(seq)
        if need:
            self.pool.extend(seq.id, need)
            seq.reserved += need

    def _make_room(self, seq: Sequence) -> bool:
        """Free blocks for `seq`'s next token by preempting the newest admitted
        sequences; False when `seq` is itself the newest and was preempted."""
        while not self.pool.can_reserve(self._blocks_short(seq)):
            victim = next(reversed(self.running.values()))
            self.preempt(victim)
            if victim is seq:
                return False
        return True
