"""The scheduler core: one `plan()` and one `commit()` per step, no clock and no
model. Any thread may submit, cancel, pause or resume; only the stepping thread
calls `plan` and `commit`."""
from __future__ import annotations

import threading
from collections import Counter

from .admission import ADMISSION_POLICIES, AdmissionPolicy
from .block_pool import BlockPool, blocks_for
from .config import SchedulerConfig
from .errors import InvalidRequest, InvariantBroken, RequestTooLarge
from .events import Event, FinishEvent, TokenEvent
from .inbox import Inbox, Wish
from .key_quota import KeyQuota
from .request import FinishReason, Request, Sequence, SeqState
from .snapshot import CoreSnapshot
from .step.decode_batch import DecodeBatch
from .step.plan import PlanFeatures, StepPlan
from .step.prefill import Prefills


class Scheduler:
    def __init__(self, config: SchedulerConfig, admission: AdmissionPolicy | None = None):
        """`admission`: the policy `config.admission` names, built with other
        parameters than its defaults."""
        if admission is not None and admission.name != config.admission:
            raise ValueError(f"the config names admission {config.admission!r}, "
                             f"the policy given is {admission.name!r}")
        self.config = config
        self.admission = admission or ADMISSION_POLICIES[config.admission]()
        self.pool = BlockPool(config.num_blocks, config.block_size)
        self.inbox = Inbox(config.max_waiting)
        self.keys = KeyQuota(config.max_streams_per_key, config.max_waiting_per_key)
        """What each API key holds, for the per-key limits."""
        self._waiting: dict[str, Sequence] = {}
        self._running: dict[str, Sequence] = {}
        self._ids_lock = threading.Lock()
        self._live_ids: set[str] = set()
        self._arrivals = 0
        self._steps = 0
        # Kept as each sequence pauses, resumes and finishes, so that no count
        # between steps needs a scan.
        self._paused_admitted = 0
        self._paused_waiting = 0
        self._batch = DecodeBatch(self._running, self.pool, config.block_size,
                                  self.admission.preempts, self._preempt)
        self._prefills = Prefills(config, self.admission, self.pool)
        self.finished_by_reason: Counter[FinishReason] = Counter()
        self.preemptions = 0
        """Sequences preempted to free blocks (a preempting admission policy only)."""
        self.recomputed_tokens = 0
        """Tokens prefilled again when preempted sequences were re-admitted."""
        self._preempted: list[Sequence] = []
        """Sequences preempted while planning the current step."""

    # -- wishes: any thread ---------------------------------------------------

    def submit(self, request: Request) -> None:
        """Record a new request, or refuse it now if it can never run."""
        self.check(request)
        with self._ids_lock:
            if request.id in self._live_ids:
                raise InvalidRequest(f"request id {request.id!r} is already in use")
            self._live_ids.add(request.id)
        key = request.key
        try:
            if key is not None:
                self.keys.take(key)
            try:
                self.inbox.submit(request)
            except BaseException:
                if key is not None:
                    self.keys.give_back(key, waiting=True)
                raise
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
        need = blocks_for(total, self.config.block_size)
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
        decodes, context = self._batch.plan()
        preempted = ()
        if self._preempted:
            preempted = tuple(self._preempted)
            self._preempted.clear()
        # As vLLM does: a step that had to preempt admits nothing new.
        prefills, partials, admitted = self._prefills.plan(self._waiting, len(self._running),
                                                           not preempted)
        if admitted:
            self._admitted(admitted)
        self.inbox.set_waiting(len(self._waiting))
        self._steps += 1
        features = PlanFeatures.of(prefills + partials if partials else prefills, len(decodes),
                                   context)
        return StepPlan(self._steps, prefills, decodes, finished, features, preempted, partials,
                        admitted)

    def commit(self, plan: StepPlan, tokens: list[int],
               ends: dict[str, FinishReason] | None = None) -> list[Event]:
        """Record one token for each planned sequence (in `plan.sequences` order);
        `ends` names the sequences the executor ended (eos, stop, error)."""
        events: list[Event] = list(plan.finished)
        seqs = plan.prefills + plan.decodes
        if len(tokens) != len(seqs):
            raise InvariantBroken(f"step {plan.index}: {len(tokens)} tokens for {len(seqs)} sequences")
        batch = self._batch
        if plan.prefills or plan.partials:
            self._prefills.commit(plan.prefills, plan.partials)
            if plan.prefills:
                batch.changed()  # the prefilled sequences decode from the next step on
        batch.context += len(plan.decodes)
        finished, bs, full = SeqState.FINISHED, self.config.block_size, batch.full
        new_tuple, length = tuple.__new__, FinishReason.LENGTH
        for seq, token in zip(seqs, tokens):
            if seq.state is finished:
                raise InvariantBroken(f"step {plan.index}: sequence {seq.id!r} finished before commit")
            request = seq.request
            out = seq.output
            out.append(token)
            n = len(out)
            num_tokens = seq.num_tokens = seq.num_tokens + 1
            if seq.emits_tokens:
                # TokenEvent(...) without the named tuple's Python-level __new__: this
                # runs for every token of every step.
                events.append(new_tuple(TokenEvent, (request.id, n - 1, token)))
            if ends and (reason := ends.get(request.id)) is not None:
                events.append(self._finish(seq, reason))
            elif n >= request.max_new_tokens:
                events.append(self._finish(seq, length))
            elif num_tokens > len(seq.block_table) * bs:
                full.append(seq)
        return events

    def steady(self) -> tuple[int, int, int] | None:
        """For a driver that makes no real tokens (a simulator): if the next steps
        would each decode the same batch and nothing else (no wish, nothing waiting,
        no prompt chunk, blocks grown within reservations, and every sequence's
        tokens read from the plans, `emits_tokens` off), the batch's size, the next
        step's context, and how many such steps can come before one finishes a
        sequence. None otherwise."""
        batch = self._batch
        seqs = batch.seqs
        if (not seqs or self._waiting or self._prefills.chunking or self.admission.preempts
                or self.inbox.has_wishes()):
            return None
        room = None
        for seq in seqs:
            if seq.emits_tokens:
                return None
            left = seq.request.max_new_tokens - len(seq.output) - 1  # its last token ends it
            room = left if room is None or left < room else room
        return len(seqs), batch.context, room

    def commit_steady(self, steps: int, token: int = 0) -> None:
        """Record `steps` steps of the steady batch (`steady`) at once, each a token
        `token` for every sequence: what as many plans and commits of those decodes
        would record, the events they would make being none."""
        batch, pool, bs = self._batch, self.pool, self.config.block_size
        for seq in batch.full:  # as the first step's plan grows them
            pool.grow(seq.id, seq.num_tokens)
        batch.full.clear()
        for seq in batch.seqs:
            seq.output.extend([token] * steps)
            n = seq.num_tokens = seq.num_tokens + steps
            # as the last step's plan left it: holding the tokens before the last,
            # and full (to grow at the next plan) if the last is beyond its blocks
            if n - 1 > len(seq.block_table) * bs:
                pool.grow(seq.id, n - 1)
            if n > len(seq.block_table) * bs:
                batch.full.append(seq)
        batch.context += steps * len(batch.seqs)
        self._steps += steps

    # -- state ----------------------------------------------------------------

    def snapshot(self) -> CoreSnapshot:
        return CoreSnapshot(
            step=self._steps,
            running=len(self._running) - self._paused_admitted,
            waiting=len(self._waiting) - self._paused_waiting,
            paused=self._paused_admitted + self._paused_waiting,
            blocks_free=self.pool.free_blocks,
            blocks_reserved=self.pool.reserved_blocks,
            blocks_used=self.pool.used_blocks,
            inbox=len(self.inbox),
            preemptions=self.preemptions,
            recomputed_tokens=self.recomputed_tokens,
            overtakes=self._prefills.overtaking.overtakes,
        )

    def has_work(self) -> bool:
        """True while a step could change something."""
        return bool(self._running or self._waiting or len(self.inbox))

    def is_drained(self) -> bool:
        """No request anywhere and every block back in the pool."""
        return (not self.has_work() and self.pool.is_whole() and not self._live_ids
                and self.keys.is_empty())

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
        """Admitted sequences left out of the batch."""
        return self._paused_admitted

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
                if seq.state is not SeqState.PAUSED:
                    self._count_paused(seq, 1)
                    seq.state = SeqState.PAUSED
            elif seq.state is SeqState.PAUSED:
                self._count_paused(seq, -1)
                seq.state = SeqState.RUNNING if seq.admitted else SeqState.WAITING
        return finished

    def _count_paused(self, seq: Sequence, change: int) -> None:
        if seq.admitted:
            self._paused_admitted += change
            self._batch.changed()
        else:
            self._paused_waiting += change
            self._prefills.overtaking.queue_changed()

    def _admitted(self, seqs: list[Sequence]) -> None:
        """Move the sequences admitted for this step from the queue to the running."""
        waiting, running = self._waiting, self._running
        for seq in seqs:
            del waiting[seq.id]
            running[seq.id] = seq
            if seq.request.key is not None and not seq.preemptions:
                self.keys.admitted(seq.request.key)
            if seq.lost_tokens:
                seq.recomputed_tokens += seq.lost_tokens
                self.recomputed_tokens += seq.lost_tokens
                seq.lost_tokens = 0

    def _preempt(self, seq: Sequence) -> None:
        """Release `seq`'s blocks and put it at the head of the queue, its output
        kept: when re-admitted, its prompt and output are prefilled again (those of
        its tokens that had been prefilled count as recomputed)."""
        self.pool.release(seq.id)
        seq.reserved = 0
        seq.lost_tokens = seq.prefill_start
        seq.prefill_left = 0
        seq.overtaken = 0  # a new wait
        self._prefills.overtaking.queue_changed()
        self._prefills.forget(seq)
        del self._running[seq.id]
        if seq.state is SeqState.PAUSED:
            self._paused_admitted -= 1
            self._paused_waiting += 1
        else:
            seq.state = SeqState.WAITING
        self._waiting = {seq.id: seq, **self._waiting}
        self.inbox.set_waiting(len(self._waiting))
        self._batch.changed()
        seq.preemptions += 1
        self.preemptions += 1
        self._preempted.append(seq)

    def _finish(self, seq: Sequence, reason: FinishReason) -> FinishEvent:
        if seq.state is SeqState.PAUSED:
            self._count_paused(seq, -1)
        if seq.admitted:
            self.pool.release(seq.id)
            del self._running[seq.id]
            self._prefills.forget(seq)
            self._batch.changed()
        else:
            del self._waiting[seq.id]
            self.inbox.set_waiting(len(self._waiting))
            self._prefills.overtaking.queue_changed()
        if seq.request.key is not None:
            self.keys.give_back(seq.request.key, waiting=not seq.admitted and not seq.preemptions)
        seq.state = SeqState.FINISHED
        seq.finish_reason = reason
        with self._ids_lock:
            self._live_ids.discard(seq.id)
        self.finished_by_reason[reason] += 1
        return FinishEvent(seq.id, reason, len(seq.output), seq.preemptions,
                           seq.recomputed_tokens)
