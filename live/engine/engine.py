"""The live engine: the scheduler core and a model runner, one step at a time.
Each step plans, runs the model, commits the sampled tokens and turns them into
text; the events come back in one batch."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from scheduler import (FinishEvent, FinishReason, Request, Scheduler, SchedulerConfig,
                       StepPlan, TokenEvent)

from .detokenizer import TextStream
from .params import GenerationInput, SamplingParams
from .step_log import StepLog

log = logging.getLogger("twinstep.engine")


@dataclass(frozen=True, slots=True)
class TokenOut:
    seq_id: str
    index: int
    token_id: int
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    seq_id: str
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    text: str
    """Text held back until the end (an unfinished stop-string prefix)."""
    preemptions: int = 0
    recomputed_tokens: int = 0
    """Tokens prefilled again when it was re-admitted after its preemptions."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """The sequence's first admission: its prefill starts in this step (and with
    chunked prefill may end several steps later, with its first token)."""

    seq_id: str


EngineEvent = Admitted | TokenOut | Finished


class Engine:
    """Owns the core and the runner. Only the stepping thread calls `step`; any
    thread may `submit`, `cancel`, `pause` and `resume`."""

    def __init__(self, runner, tokenizer, config: SchedulerConfig, step_log: StepLog | None = None):
        """Without a `step_log`, the steps are kept in a ring of the default size only."""
        self.runner = runner
        self.tokenizer = tokenizer
        self.core = Scheduler(config)
        self.step_log = step_log if step_log is not None else StepLog()
        self.eos_token_ids = frozenset(runner.eos_token_ids)
        self._texts: dict[str, TextStream] = {}
        self._prompt_lens: dict[str, int] = {}
        self._epoch = time.perf_counter()
        self.progressed = False
        """Whether the last step changed anything: computed (a step of prompt chunks
        alone makes no event), ended or preempted a sequence. When it did not, only
        a wish can."""

    def submit(self, seq_id: str, prompt_ids: list[int], max_new_tokens: int,
               sampling: SamplingParams = SamplingParams()) -> None:
        """Queue a request, or raise a `SubmitRefused` before anything is held."""
        payload = GenerationInput(tuple(prompt_ids), sampling)
        self.core.submit(Request(seq_id, len(prompt_ids), max_new_tokens, payload))

    def cancel(self, seq_id: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        self.core.cancel(seq_id, reason)

    def pause(self, seq_id: str) -> None:
        self.core.pause(seq_id)

    def resume(self, seq_id: str) -> None:
        self.core.resume(seq_id)

    def has_work(self) -> bool:
        return self.core.has_work()

    def step(self) -> list[EngineEvent]:
        start = time.perf_counter()
        plan = self.core.plan()
        # a recomputed sequence's text goes on where it was
        admitted = [seq for seq in plan.admitted if not seq.preemptions]
        for seq in admitted:
            payload = seq.request.payload
            self._texts[seq.id] = TextStream(self.tokenizer, payload.prompt_ids, payload.sampling.stop)
            self._prompt_lens[seq.id] = seq.prompt_len
        self.progressed = not plan.is_empty or bool(plan.finished or plan.preempted)
        if plan.is_empty:
            return self._convert(self.core.commit(plan, []), {})
        try:
            tokens = self.runner.execute(plan)
        except Exception:
            # the core applies these cancels at the next boundary, releasing blocks there
            log.exception("step %d failed; its sequences end with an error", plan.index)
            for seq in plan.sequences:
                self.core.cancel(seq.id, FinishReason.ERROR)
            return self._convert(plan.finished, {})
        deltas, ends = self._read(plan, tokens)
        out: list[EngineEvent] = [Admitted(seq.id) for seq in admitted]
        out += self._convert(self.core.commit(plan, tokens, ends), deltas)
        self.step_log.record(plan.index, start - self._epoch, time.perf_counter() - start,
                             plan.features, tokens=len(tokens), admitted=self.core.num_admitted,
                             waiting=self.core.num_waiting, paused=self.core.num_paused,
                             blocks_reserved=self.core.pool.reserved_blocks,
                             device_s=getattr(self.runner, "last_device_s", None))
        return out

    def _read(self, plan: StepPlan, tokens: list[int]):
        """Each sequence's text delta, and the sequences this step ends: a stop
        string in the text, or EOS from the model."""
        deltas: dict[str, str] = {}
        ends: dict[str, FinishReason] = {}
        eos = self.eos_token_ids
        for seq, token in zip(plan.sequences, tokens):
            text = self._texts[seq.id]
            deltas[seq.id] = text.push(token)
            if text.stopped:
                ends[seq.id] = FinishReason.STOP
            elif token in eos and not seq.request.payload.sampling.ignore_eos:
                ends[seq.id] = FinishReason.EOS
        return deltas, ends

    def _convert(self, events, deltas: dict[str, str]) -> list[EngineEvent]:
        out: list[EngineEvent] = []
        for e in events:
            if isinstance(e, TokenEvent):
                out.append(TokenOut(e.seq_id, e.index, e.token_id, deltas[e.seq_id]))
            else:
                out.append(self._finished(e))
        return out

    def _finished(self, e: FinishEvent) -> Finished:
        text = self._texts.pop(e.seq_id, None)
        self.runner.forget(e.seq_id)
        return Finished(e.seq_id, e.reason, self._prompt_lens.pop(e.seq_id, 0), e.num_generated,
                        text.flush() if text is not None else "",
                        e.preemptions, e.recomputed_tokens)
