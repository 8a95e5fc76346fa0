"""The prefills of a step: first the next chunk of each admitted prompt still being
prefilled, then waiting requests admitted in arrival order while a batch slot,
their reservation and the step's prefill budget fit; a request whose reservation
does not fit may be overtaken by later ones that do, a bounded number of times."""
from __future__ import annotations

from ..admission import AdmissionPolicy
from ..block_pool import BlockPool
from ..config import SchedulerConfig
from ..request import Sequence, SeqState
from .overtake import Overtaking


class Prefills:
    __slots__ = ("config", "policy", "pool", "chunking", "overtaking")

    def __init__(self, config: SchedulerConfig, policy: AdmissionPolicy, pool: BlockPool):
        self.config = config
        self.policy = policy
        self.pool = pool
        self.chunking: dict[str, Sequence] = {}
        """Admitted sequences with chunks of their prompt still to prefill, in
        admission order."""
        self.overtaking = Overtaking(config.max_overtakes)

    def plan(self, waiting: dict[str, Sequence], num_admitted: int,
             admit: bool) -> tuple[list[Sequence], list[Sequence], list[Sequence]]:
        """The step's prefills (prompts computed to their end: each makes its first
        token), its partials (chunks that make nothing yet) and the sequences newly
        admitted among them, if `admit`; `num_admitted` sequences hold a slot."""
        budget = self.config.max_prefill_tokens
        if self.chunking:
            prefills, partials, budget = self._continue(budget)
        else:
            prefills, partials = [], []
        if not admit or not waiting:
            return prefills, partials, []
        return prefills, partials, self._admit(waiting, num_admitted, prefills, partials, budget)

    def commit(self, prefills: list[Sequence], partials: list[Sequence]) -> None:
        """The step has computed its chunks."""
        for seq in partials:
            seq.prefill_left -= seq.chunk
        chunking = self.chunking
        for seq in prefills:
            seq.prefill_left = 0
            if chunking:
                chunking.pop(seq.id, None)

    def forget(self, seq: Sequence) -> None:
        """`seq` has lost its blocks (finished or preempted): no chunk of it is left."""
        self.chunking.pop(seq.id, None)

    def _continue(self, budget: int) -> tuple[list[Sequence], list[Sequence], int]:
        """The next chunk of each unpaused sequence still prefilling, within the
        step's budget; and the budget left."""
        prefills: list[Sequence] = []
        partials: list[Sequence] = []
        for seq in self.chunking.values():
            if budget <= 0:
                break
            if seq.state is SeqState.PAUSED:
                continue
            seq.chunk = min(seq.prefill_left, budget)
            budget -= seq.chunk
            (prefills if seq.chunk == seq.prefill_left else partials).append(seq)
        return prefills, partials, budget

    def _admit(self, waiting: dict[str, Sequence], num_admitted: int, prefills: list[Sequence],
               partials: list[Sequence], budget: int | None) -> list[Sequence]:
        """Admit in arrival order, adding each to `prefills` (or to `partials` when
        only a chunk of it fits); returns those admitted, still in `waiting`. A
        paused waiting request is passed over (it is not ready). A ready one whose
        reservation does not fit is passed over too while later admissions have
        overtaken it fewer than `max_overtakes` times; once they have, it stops
        admission, so nothing overtakes it until it fits."""
        config, pool, policy = self.config, self.pool, self.policy
        admitted: list[Sequence] = []
        overtaking = self.overtaking
        if overtaking.record is None:
            candidates, passed = waiting.values(), []
        else:
            candidates, passed = overtaking.resume(waiting, pool.free_blocks)
        # passed: ready requests that did not fit, which each admission from here on overtakes
        bound = overtaking.bound
        chunked = config.chunked_prefill
        slots = config.max_batch - num_admitted
        headroom = policy.headroom(config.num_blocks)
        for seq in candidates:
            if slots <= 0 or (chunked and budget <= 0):
                break
            if seq.state is SeqState.PAUSED:
                continue
            n = seq.num_tokens
            if budget is not None and not chunked and admitted and n > budget:
                break
            need = policy.reservation(seq, config.block_size)
            # headroom only beside others: alone, a request that fits the pool runs
            if not pool.can_reserve(need + (headroom if num_admitted or admitted else 0)):
                if seq.overtaken >= bound:
                    break
                passed.append(seq)
                continue
            seq.block_table = pool.reserve(seq.id, need)
            seq.reserved = need
            pool.grow(seq.id, n)
            seq.state = SeqState.RUNNING
            seq.prefill_left = n
            seq.chunk = min(n, budget) if chunked else n
            if seq.chunk < n:
                partials.append(seq)
                self.chunking[seq.id] = seq
            else:
                prefills.append(seq)
            admitted.append(seq)
            if budget is not None:
                budget -= seq.chunk
            slots -= 1
            if passed and overtaking.overtook(passed):
                break
        else:
            if passed:
                overtaking.scanned(waiting, pool.free_blocks, passed)
        return admitted
