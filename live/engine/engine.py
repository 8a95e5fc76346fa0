"""The live engine: the scheduler core and a model runner, one step at a time.
Each step plans, runs the model, commits the sampled tokens and turns them into
text; the core's events come back with that text in one `StepOutput`."""
from __future__ import annotations

import logging
import time

from scheduler import Event, FinishEvent, FinishReason, Request, Scheduler, SchedulerConfig, StepPlan

from .detokenizer import TextStream
from ..runner.params import GenerationInput, SamplingParams
from .step_log import StepLog
from .step_output import StepOutput

log = logging.getLogger("twinstep.engine")


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

    def step(self) -> StepOutput:
        start = time.perf_counter()
        plan = self.core.plan()
        # a recomputed sequence's text goes on where it was
        admitted = [seq for seq in plan.admitted if not seq.preemptions]
        for seq in admitted:
            payload = seq.request.payload
            self._texts[seq.id] = TextStream(self.tokenizer, payload.prompt_ids, payload.sampling.stop)
        self.progressed = not plan.is_empty or bool(plan.finished or plan.preempted)
        if plan.is_empty:
            return self._output(self.core.commit(plan, []), {}, [])
        try:
            tokens = self.runner.execute(plan)
        except Exception:
            # the core applies these cancels at the next boundary, releasing blocks there
            log.exception("step %d failed; its sequences end with an error", plan.index)
            for seq in plan.sequences:
                self.core.cancel(seq.id, FinishReason.ERROR)
            return self._output(plan.finished, {}, [])
        deltas, ends = self._read(plan, tokens)
        out = self._output(self.core.commit(plan, tokens, ends), deltas,
                           [seq.id for seq in admitted])
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

    def _output(self, events: list[Event], deltas: dict[str, str],
                admitted: list[str]) -> StepOutput:
        """The step's output; each finished sequence's text and runner state let go."""
        held: dict[str, str] = {}
        for e in events:
            if isinstance(e, FinishEvent):
                text = self._texts.pop(e.seq_id, None)
                self.runner.forget(e.seq_id)
                held[e.seq_id] = text.flush() if text is not None else ""
        return StepOutput(events, deltas, held, admitted)
