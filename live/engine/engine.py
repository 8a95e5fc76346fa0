"""The live engine: the scheduler core and a model runner, one step at a time.
Each step plans, runs the model, commits the sampled tokens and turns them into
text; the core's events come back with that text in one `StepOutput`. With
`prefill_pass_tokens` the prompts run as passes (`passes`), and the first tokens of
each pass but the last are handed on as soon as it ends, in a `StepOutput` of
their own; the step's output then leaves them out (the core commits them once,
with the step).

A request fails alone: a sequence whose model run (`isolation`), text or runner
state raises ends with `error` at the next step boundary, and the others go on. A
commit that raises ends its step's sequences. Only a core that can no longer be
trusted (its planning raised, or commits keep failing) stops the engine, with
`EngineBroken`."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from scheduler import (Event, FinishEvent, FinishReason, Request, Scheduler, SchedulerConfig,
                       Sequence, SeqState, StepPlan, TokenEvent, prefill_passes)

from .detokenizer import TextStream
from .isolation import StepRun
from .passes import run_in_passes
from ..runner.params import GenerationInput, SamplingParams
from .step_log import StepLog
from .step_output import StepOutput

log = logging.getLogger("twinstep.engine")

FAILED_COMMITS_BEFORE_BROKEN = 3
"""Commits that raise in a row before the engine gives up: one is a step's bad
luck, several are a core whose bookkeeping no longer holds."""


class EngineBroken(RuntimeError):
    """The engine cannot step on: whatever it still holds is lost."""


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
        self._started = time.time()
        """When the step under way began, Unix seconds."""
        self.failed_commits = 0
        """Commits that raised since the last one that did not."""
        self.progressed = False
        """Whether the last step changed anything: computed (a step of prompt chunks
        alone makes no event), ended or preempted a sequence. When it did not, only
        a wish can."""

    def submit(self, seq_id: str, prompt_ids: list[int], max_new_tokens: int,
               sampling: SamplingParams = SamplingParams(), key: str | None = None) -> None:
        """Queue a request of `key`, or raise a `SubmitRefused` before anything is held."""
        payload = GenerationInput(tuple(prompt_ids), sampling)
        self.core.submit(Request(seq_id, len(prompt_ids), max_new_tokens, payload, key))

    def cancel(self, seq_id: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        self.core.cancel(seq_id, reason)

    def pause(self, seq_id: str) -> None:
        self.core.pause(seq_id)

    def resume(self, seq_id: str) -> None:
        self.core.resume(seq_id)

    def has_work(self) -> bool:
        return self.core.has_work()

    def step(self, early: Callable[[StepOutput], None] | None = None) -> StepOutput:
        """One step; raises `EngineBroken` only when no step may follow. `early`
        takes the first tokens of each prefill pass but the last as it ends; without
        it they come with the step's output."""
        start = time.perf_counter()
        cpu_start = time.thread_time()
        self._started = time.time()
        try:
            plan = self.core.plan()
        except Exception as exc:
            raise EngineBroken("planning a step raised: the core can no longer be "
                               "trusted") from exc
        # a recomputed sequence's text goes on where it was
        admitted = [seq for seq in plan.admitted if not seq.preemptions]
        failed = frozenset(seq.id for seq in admitted if not self._open_text(seq))
        self.progressed = not plan.is_empty or bool(plan.finished or plan.preempted)
        if plan.is_empty:
            return self._output(self._commit(plan, [], {}), {}, [])
        # before the commit moves each chunk's start on to its end
        chunked = bool(plan.partials) or any(seq.prefill_start for seq in plan.prefills)
        run, deltas, ends, handed, device_s = self._run(plan, failed, early)
        events = self._commit(run.plan, run.tokens, ends)
        if handed:
            events = [e for e in events if type(e) is not TokenEvent or e not in handed]
        failed |= run.failed
        for seq_id in failed:
            # applied at the next boundary, which releases the blocks
            self.core.cancel(seq_id, FinishReason.ERROR)
        out = self._output(events, deltas, [seq.id for seq in admitted if seq.id not in failed])
        if not run.retried:
            self.step_log.record(plan.index, start - self._epoch, time.perf_counter() - start,
                                 plan.features, tokens=len(run.tokens),
                                 admitted=self.core.num_admitted, waiting=self.core.num_waiting,
                                 paused=self.core.num_paused,
                                 blocks_reserved=self.core.pool.reserved_blocks,
                                 chunked=chunked, device_s=device_s,
                                 cpu_s=time.thread_time() - cpu_start)
        return out

    def _run(self, plan: StepPlan, failed: frozenset[str],
             early: Callable[[StepOutput], None] | None):
        """Run the plan without `failed`, pass by pass, and read its tokens' text:
        the run, the text deltas, the sequences the text or EOS ends, the events
        handed on to `early` and the device time."""
        deltas: dict[str, str] = {}
        ends: dict[str, FinishReason] = {}
        handed: set[TokenEvent] = set()

        def ran_pass(run: StepRun) -> None:
            # the text of a pass's tokens is made now, once, for the step's output too
            pass_deltas, pass_ends = self._read(zip(run.plan.sequences, run.tokens))
            deltas.update(pass_deltas)
            ends.update(pass_ends)
            if early is not None:
                handed.update(self._hand_on(run, pass_deltas, early))

        passes = prefill_passes(plan.prefills, self.core.config.prefill_pass_tokens)
        run, device_s = run_in_passes(self.runner, plan, passes, failed, ran_pass)
        made = zip(run.plan.sequences, run.tokens)
        last_deltas, last_ends = self._read(
            [(seq, token) for seq, token in made if seq.id not in deltas] if deltas else made)
        deltas.update(last_deltas)
        ends.update(last_ends)
        return run, deltas, ends, handed, device_s

    def _hand_on(self, run: StepRun, deltas: dict[str, str],
                 early: Callable[[StepOutput], None]) -> list[TokenEvent]:
        """Hand on the first tokens a pass made, as the events the step's commit
        will make of them; those events."""
        tokens = [TokenEvent(seq.id, len(seq.output), token)
                  for seq, token in zip(run.plan.sequences, run.tokens) if seq.emits_tokens]
        if tokens:
            early(StepOutput(tokens, deltas, {},
                             [seq.id for seq in run.plan.admitted if not seq.preemptions],
                             self._started))
        return tokens

    def _open_text(self, seq: Sequence) -> bool:
        """Start the text of a sequence admitted for the first time; False if that raised."""
        payload = seq.request.payload
        try:
            self._texts[seq.id] = TextStream(self.tokenizer, payload.prompt_ids,
                                             payload.sampling.stop)
        except Exception:
            log.exception("the text of sequence %r cannot start; it ends with an error", seq.id)
            return False
        return True

    def _read(self, made: Iterable[tuple[Sequence, int]]):
        """Each sequence's text delta for the token it `made`, and the sequences this
        step ends: a stop string in the text, EOS from the model, or text that could
        not be made."""
        deltas: dict[str, str] = {}
        ends: dict[str, FinishReason] = {}
        eos = self.eos_token_ids
        for seq, token in made:
            text = self._texts.get(seq.id)
            try:
                deltas[seq.id] = text.push(token)
            except Exception:
                log.exception("the text of sequence %r failed; it ends with an error", seq.id)
                deltas[seq.id] = ""
                ends[seq.id] = FinishReason.ERROR
                continue
            if text.stopped:
                ends[seq.id] = FinishReason.STOP
            elif token in eos and not seq.request.payload.sampling.ignore_eos:
                ends[seq.id] = FinishReason.EOS
        return deltas, ends

    def _commit(self, plan: StepPlan, tokens: list[int],
                ends: dict[str, FinishReason]) -> list[Event]:
        try:
            events = self.core.commit(plan, tokens, ends)
        except Exception as exc:
            self.failed_commits += 1
            if self.failed_commits >= FAILED_COMMITS_BEFORE_BROKEN:
                raise EngineBroken(f"{self.failed_commits} commits in a row raised") from exc
            log.exception("step %d could not be committed; its sequences end with an error",
                          plan.index)
            return self._abandon(plan)
        self.failed_commits = 0
        return events

    def _abandon(self, plan: StepPlan) -> list[Event]:
        """After a commit that raised: every sequence of the step ends with an error,
        at the next boundary, or now for those the commit had already finished."""
        events: list[Event] = list(plan.finished)
        for seq in plan.computed:
            if seq.state is SeqState.FINISHED:
                events.append(FinishEvent(seq.id, FinishReason.ERROR, len(seq.output),
                                          seq.preemptions, seq.recomputed_tokens))
            else:
                self.core.cancel(seq.id, FinishReason.ERROR)
        return events

    def _output(self, events: list[Event], deltas: dict[str, str],
                admitted: list[str]) -> StepOutput:
        """The step's output; each finished sequence's text and runner state let go."""
        held: dict[str, str] = {}
        for e in events:
            if isinstance(e, FinishEvent):
                held[e.seq_id] = self._let_go(e.seq_id)
        return StepOutput(events, deltas, held, admitted, self._started)

    def _let_go(self, seq_id: str) -> str:
        """Forget a finished sequence; the text it held back to its end."""
        text = self._texts.pop(seq_id, None)
        held = ""
        try:
            held = text.flush() if text is not None else ""
        except Exception:
            log.exception("the text sequence %r held back is lost", seq_id)
        try:
            self.runner.forget(seq_id)
        except Exception:
            log.exception("the runner could not forget sequence %r", seq_id)
        return held
