"""The scheduler core: one `plan()` and one `commit()` per step, no clock and no
model. Any thread may submit, cancel, pause or resume; only the stepping thread
calls `plan` and `commit`."""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

from .admission import AdmissionPolicy, ReserveWhole
from .block_pool import BlockPool
from .errors import InvalidRequest, InvariantBroken, RequestTooLarge
from .events import Event, FinishEvent, TokenEvent
from .inbox import Inbox, Wish
from .plan import PlanFeatures, StepPlan
from .request import FinishReason, Request, Sequence, SeqState
from .summary import StepSummary


@dataclass(frozen=True)
class SchedulerConfig:
    num_blocks: int
    block_size: int = 16
    max_batch: int = 32
    max_waiting: int = 1024
    max_model_len: int | None = None
    max_prefill_tokens: int | None = None
    """Prompt tokens admitted in one step; the first admission of a step ignores it
    so that a long prompt still runs."""


class Scheduler:
    def __init__(self, config: SchedulerConfig, admission: AdmissionPolicy | None = None):
        self.config = config
        self.admission = admission or ReserveWhole()
        self.pool = BlockPool(config.num_blocks, config.block_size)
        self.inbox = Inbox(config.max_waiting)
        self._waiting: dict[str, Sequence] = {}
        self._running: dict[str, Sequence] = {}
        self._ids_lock = threading.Lock()
        self._live_ids: set[str] = set()
        self._arrivals = 0
        self._steps = 0
        self.finished_by_reason: Counter[FinishReason] = Counter()

    # -- wishes: any thread ---------------------------------------------------

    def submit(self, request: Request) -> None:
        """Record a new request, or refuse it now if it can never run."""
        self.check(request)
        with self._ids_lock:
            if request.id in self._live_ids:
                raise InvalidRequest(f"request id {request.id!r} is already in use")
            self._live_ids.add(request.id)
        try:
            self.inbox.submit(request)
        except BaseException:
            with self._ids_lock:
                self._live_ids.discard(request.id)
            raise

    def check(self, request: Request) -> None:
        """Raise the refusal `submit` would give for lengths alone."""
        if request.prompt_len < 1:
            raise InvalidRequest("the prompt must hold at least one token")
        if request.max_new_tokens < 1:
            raise InvalidRequest("max_new_tokens must be at least 1")
        total = request.prompt_len + request.max_new_tokens
        limit = self.config.max_model_len
        if limit is not None and total > limit:
            raise RequestTooLarge(
                f"prompt ({request.prompt_len}) + max_new_tokens ({request.max_new_tokens}) "
                f"= {total} tokens is over the model's context of {limit}")
        need = self.admission.reservation(request, self.config.block_size)
        if need > self.config.num_blocks:
            raise RequestTooLarge(
                f"request needs {need} KV blocks; the pool has {self.config.num_blocks}")

    def cancel(self, seq_id: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        self.inbox.cancel(seq_id, reason)

    def pause(self, seq_id: str) -> None:
        self.inbox.pause(seq_id)

    def resume(self, seq_id: str) -> None:
        self.inbox.resume(seq_id)

    # -- steps: the stepping thread only ---------------------------------------

    def plan(self) -> StepPlan:
        finished = self._apply_inbox()
        prefills = self._admit()
        decodes = []
        context = 0
        pool, bs, running = self.pool, self.config.block_size, SeqState.RUNNING
        for seq in self._running.values():
            if seq.state is running and seq.output:
                n = seq.num_tokens
                if n > len(seq.block_table) * bs:
                    pool.grow(seq.id, n)
                decodes.append(seq)
                context += n
        self._steps += 1
        features = PlanFeatures(
            num_prefills=len(prefills),
            prefill_tokens=sum(s.prompt_len for s in prefills),
            prefill_tokens_sq=sum(s.prompt_len * s.prompt_len for s in prefills),
            decode_batch=len(decodes),
            context_tokens=context,
        )
        return StepPlan(self._steps, prefills, decodes, finished, features)

    def commit(self, plan: StepPlan, tokens: list[int],
               ends: dict[str, FinishReason] | None = None) -> list[Event]:
        """Record one token for each planned sequence (in `plan.sequences` order);
        `ends` names the sequences the executor ended (eos, stop, error)."""
        events: list[Event] = list(plan.finished)
        seqs = plan.prefills + plan.decodes
        if len(tokens) != len(seqs):
            raise InvariantBroken(f"step {plan.index}: {len(tokens)} tokens for {len(seqs)} sequences")
        finished = SeqState.FINISHED
        for seq, token in zip(seqs, tokens):
            if seq.state is finished:
                raise InvariantBroken(f"step {plan.index}: sequence {seq.id!r} finished before commit")
            out = seq.output
            out.append(token)
            seq.num_tokens += 1
            n = len(out)
            events.append(TokenEvent(seq.request.id, n - 1, token))
            reason = ends.get(seq.request.id) if ends else None
            if reason is None and n >= seq.request.max_new_tokens:
                reason = FinishReason.LENGTH
            if reason is not None:
                events.append(self._finish(seq, reason))
        return events

    # -- state ----------------------------------------------------------------

    def summary(self) -> StepSummary:
        states = Counter(s.state for s in self._running.values())
        states.update(s.state for s in self._waiting.values())
        return StepSummary(
            step=self._steps,
            running=states[SeqState.RUNNING],
            waiting=states[SeqState.WAITING],
            paused=states[SeqState.PAUSED],
            blocks_free=self.pool.free_blocks,
            blocks_reserved=self.pool.reserved_blocks,
            blocks_used=self.pool.used_blocks,
            inbox=len(self.inbox),
        )

    def has_work(self) -> bool:
        """True while a step could change something."""
        return bool(self._running or self._waiting or len(self.inbox))

    def is_drained(self) -> bool:
        """No request anywhere and every block back in the pool."""
        return not self.has_work() and self.pool.is_whole() and not self._live_ids

    def sequence(self, seq_id: str) -> Sequence | None:
        return self._running.get(seq_id) or self._waiting.get(seq_id)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_admitted(self) -> int:
        """Sequences holding a slot and blocks, paused ones included."""
        return len(self._running)

    @property
    def num_paused(self) -> int:
        return sum(1 for s in self._running.values() if s.state is SeqState.PAUSED)

    @property
    def waiting(self) -> list[Sequence]:
        return list(self._waiting.values())

    @property
    def running(self) -> list[Sequence]:
        return list(self._running.values())

    # -- inside a step --------------------------------------------------------

    def _apply_inbox(self) -> list[FinishEvent]:
        finished = []
        for wish, *args in self.inbox.take():
            if wish is Wish.SUBMIT:
                request = args[0]
                self._waiting[request.id] = Sequence(request, self._arrivals)
                self._arrivals += 1
                continue
            seq = self.sequence(args[0])
            if seq is None:
                continue  # unknown or already finished: harmless
            if wish is Wish.CANCEL:
                finished.append(self._finish(seq, args[1]))
            elif wish is Wish.PAUSE:
                seq.state = SeqState.PAUSED
            elif seq.state is SeqState.PAUSED:
                seq.state = SeqState.RUNNING if seq.admitted else SeqState.WAITING
        return finished

    def _admit(self) -> list[Sequence]:
        """Admit in arrival order while a slot and the reservation fit. A paused
        waiting request is passed over (it is not ready); a ready one that does not
        fit stops admission, so nothing overtakes it."""
        admitted: list[Sequence] = []
        budget = self.config.max_prefill_tokens
        prompt_tokens = 0
        slots = self.config.max_batch - len(self._running)
        for seq in self._waiting.values():
            if slots <= 0:
                break
            if seq.state is SeqState.PAUSED:
                continue
            if budget is not None and admitted and prompt_tokens + seq.prompt_len > budget:
                break
            need = self.admission.reservation(seq.request, self.config.block_size)
            if not self.pool.can_reserve(need):
                break
            seq.block_table = self.pool.reserve(seq.id, need)
            seq.reserved = need
            self.pool.grow(seq.id, seq.prompt_len)
            seq.state = SeqState.RUNNING
            admitted.append(seq)
            prompt_tokens += seq.prompt_len
            slots -= 1
        for seq in admitted:
            del self._waiting[seq.id]
            self._running[seq.id] = seq
        self.inbox.set_waiting(len(self._waiting))
        return admitted

    def _finish(self, seq: Sequence, reason: FinishReason) -> FinishEvent:
        if seq.admitted:
            self.pool.release(seq.id)
            del self._running[seq.id]
        else:
            del self._waiting[seq.id]
            self.inbox.set_waiting(len(self._waiting))
        seq.state = SeqState.FINISHED
        seq.finish_reason = reason
        with self._ids_lock:
            self._live_ids.discard(seq.id)
        self.finished_by_reason[reason] += 1
        return FinishEvent(seq.id, reason, len(seq.output))
