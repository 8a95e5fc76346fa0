"""A step plan: what the executor must compute in one step, and the features
that predict what it costs."""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ..events import FinishEvent
from ..request import Sequence


@dataclass(slots=True)
class PlanFeatures:
    """The counts a step-cost model reads. Not frozen: one is made every step, and
    a frozen dataclass takes longer to make than the rest of a small step's plan."""

    num_prefills: int
    """Prompts (or chunks of prompts) prefilled."""
    prefill_tokens: int
    prefill_tokens_sq: int
    """Each chunk's tokens times the context they attend to (the chunk and the
    tokens before it): a whole prompt's length squared."""
    decode_batch: int
    context_tokens: int
    prefix_tokens: int = 0
    """The tokens before each chunk that continues a prompt: what its attention
    reads back from the cache (none for a chunk that starts its prompt)."""

    @classmethod
    def of(cls, chunks: list[Sequence], decode_batch: int, context: int) -> PlanFeatures:
        """The features of a step that prefills `chunks` and decodes `decode_batch`
        sequences holding `context` tokens."""
        prefill_tokens = prefill_tokens_sq = prefix_tokens = 0
        for seq in chunks:
            n, before = seq.chunk, seq.prefill_start
            prefill_tokens += n
            # n times the context it attends to: the tokens before it and itself
            prefill_tokens_sq += n * (before + n)
            prefix_tokens += before
        return cls(len(chunks), prefill_tokens, prefill_tokens_sq, decode_batch, context,
                   prefix_tokens)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(slots=True)
class StepPlan:
    """Prefills compute the rest of a prompt (`seq.chunk` tokens from
    `seq.prefill_start`: the whole prompt unless it is chunked) and make the first
    token; partials compute a chunk of a prompt and make nothing yet; decodes make
    one token each with the context their block table holds. `finished` holds the
    sequences the inbox ended before this step (cancels): the executor skips them.
    `preempted` holds those that lost their blocks for this step's decodes: they
    make nothing until re-admitted. `admitted` holds those admitted in this step
    (among the prefills and partials), re-admissions after preemption included."""

    index: int
    prefills: list[Sequence]
    decodes: list[Sequence]
    finished: list[FinishEvent]
    features: PlanFeatures
    preempted: tuple[Sequence, ...]
    partials: list[Sequence]
    admitted: list[Sequence]

    @property
    def sequences(self) -> list[Sequence]:
        """The order in which the executor returns one token each."""
        return self.prefills + self.decodes

    @property
    def chunks(self) -> list[Sequence]:
        """Every sequence that prefills in this step, those that finish first."""
        return self.prefills + self.partials

    @property
    def is_empty(self) -> bool:
        return not self.prefills and not self.decodes and not self.partials

    @property
    def computed(self) -> list[Sequence]:
        """Every sequence the executor computes something for."""
        return self.prefills + self.partials + self.decodes

    def part(self, seq_ids: Collection[str]) -> StepPlan:
        """The plan of the sequences in `seq_ids` alone: each one's share of this
        step, as it would be planned with nothing else beside it. `finished` and
        `preempted` are the step's own (an executor skips them; a commit reports
        the cancels). Committing a part records nothing for the sequences outside it."""
        def keep(seqs: list[Sequence]) -> list[Sequence]:
            return [seq for seq in seqs if seq.id in seq_ids]
        prefills, decodes, partials = keep(self.prefills), keep(self.decodes), keep(self.partials)
        features = PlanFeatures.of(prefills + partials, len(decodes),
                                   sum(seq.num_tokens for seq in decodes))
        return StepPlan(self.index, prefills, decodes, self.finished, features, self.preempted,
                        partials, keep(self.admitted))
