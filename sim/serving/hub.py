"""The server side of every stream, the simulated twin of the live hub: it hands
each step's events to the streams, applies the backlog policy, and turns drops and
client disconnects into cancels in the core's inbox.

Under a policy that drops stalled streams the hub also looks for stalls on a
watchdog, as the live hub does (`watchdog.py`), which also cuts the readers of
closed streams that make no progress for the timeout. A dropped stream's reader
that still reads takes everything queued before the drop, then `slow_client`:
the drop frees the engine, not the reader."""
from __future__ import annotations

import math
from typing import Callable

import simpy

from scheduler import (BacklogPolicy, Decision, Event, FinishEvent, FinishReason, Request,
                       Scheduler, Sequence, TokenEvent)
from traces.record import TraceRequest

from ..overheads import Overheads
from ..wire import WireFormat
from .connection import Connection
from .reader import Reader
from .step_times import StepTimes
from .watchdog import Watchdog


class Hub:
    def __init__(self, env: simpy.Environment, core: Scheduler, policy: BacklogPolicy,
                 overheads: Overheads, wire: WireFormat, wake: Callable[[], None],
                 settled: Callable[[Reader], None], *, resume_grace_s: float = 0.0,
                 max_tokens_factor: float = 1.0, listens: bool = True):
        self.env = env
        self.core = core
        self.policy = policy
        self.overheads = overheads
        self.token_bytes = wire.token_bytes
        self.final_bytes = wire.final_bytes
        self.wake = wake
        """Wakes the engine loop if it sleeps: every wish goes with one."""
        self.settled = settled
        """Told of each client whose record is whole: the client is done and the
        engine has ended its sequence (or never had it); the hub forgets it then."""
        self.resume_grace_s = resume_grace_s
        self.max_tokens_factor = max_tokens_factor
        self.listens = listens
        """Whether the server listens for a client's leave; if not, it learns of
        it from the next write to the stream (`unheard` until then)."""
        self.unheard: set[str] = set()
        self.engine_waits = policy.engine_waits
        self.clients: dict[str, Reader] = {}
        """Clients whose request the core accepted, until they are settled."""
        self.backlogged: dict[Reader, None] = {}
        """Clients whose server-side queue is not empty, in the order they backed up
        (a dict, so that the policy sees them in the same order in every run)."""
        self.instant_readers: dict[str, Reader] = {}
        """Instant readers still reading: they take events as they are delivered."""
        self.step_times = StepTimes()
        self.leaving: dict[int, list[tuple[Reader, int]]] = {}
        """Instant readers that leave after the token a step delivers, by the step's
        index, each with the count of its runs when it was due (a preemption since
        ends that run, and with it this leave)."""
        self.left: set[str] = set()
        """Requests whose client has left: what the engine makes for them is wasted."""
        self.events_discarded = 0
        """Events the engine made for streams the server had already closed."""
        self.watchdog = Watchdog(env, policy, self.backlogged, self._decide, self._cut)
        self.readers_cut = 0
        """Readers of closed streams cut for making no progress."""
        self._drained: simpy.Event | None = None
        self.front_last_s = float("-inf")
        """When the server's front last handed a request to the core."""

    def taken_in(self) -> float:
        """How long from now until a request arriving now is in the core's inbox.
        The live server takes requests in on one event loop, one after another: a
        request alone takes `request_s`, and of requests that arrive together (a
        load tool's users all starting at once, a burst) each follows the last by
        `front_s`, so an idle engine may start a step with the first while the
        rest wait for that step, as they do live."""
        now = self.env.now
        self.front_last_s = max(now + self.overheads.request_s,
                                self.front_last_s + self.overheads.front_s)
        return self.front_last_s - now

    def open(self, client: Reader) -> None:
        """Submit the client's request; a refusal propagates before the stream opens."""
        r = client.request
        # it asks for what max_tokens_factor says; its payload is where the model stops
        self.core.submit(Request(r.id, r.prompt_tokens, self._asked(r), r.max_new_tokens,
                                 key=r.key))
        client.connection = Connection(self.overheads.transport_bytes, self.env.now)
        self.clients[r.id] = client
        if client.instant:
            self.instant_readers[r.id] = client
        self.wake()

    # -- from the engine --------------------------------------------------------

    def admitted(self, seqs: list[Sequence], start: float) -> None:
        """Sequences admitted in the step that began at `start`; those re-admitted
        after preemption keep the time of their first admission."""
        for seq in seqs:
            if not seq.preemptions:
                self.clients[seq.id].outcome.admitted_s = start

    def prefilled(self, prefills: list[Sequence], end: float) -> None:
        """Sequences whose prefill ended with the step that ended at `end`; those
        re-admitted after preemption made their first token before and keep its time."""
        for seq in prefills:
            if not seq.preemptions:
                self.clients[seq.id].outcome.first_token_engine_s = end

    def first_tokens(self, seqs: list[Sequence], now: float) -> set[str]:
        """The first tokens of a prefill pass that ended at `now`, before its step:
        delivered now (the step's commit leaves out those of the sequences returned),
        or for an instant reader (whose token times are its steps') noted as taken."""
        handed, events = set(), []
        at = now + self.overheads.delivery_s
        for seq in seqs:
            if not seq.preemptions:
                self.clients[seq.id].outcome.first_token_engine_s = now
            reader = self.instant_readers.get(seq.id)
            if reader is not None:
                reader.took_early(len(seq.output), at)
            elif seq.emits_tokens:
                handed.add(seq.id)
                events.append(TokenEvent(seq.id, len(seq.output), 0))
        if events:
            self.committed(events, now, from_step=False)
        return handed

    def _asked(self, r: TraceRequest) -> int:
        """The tokens `r` asks for: its output times the factor, within the context."""
        asked = math.ceil(r.max_new_tokens * self.max_tokens_factor)
        context = self.core.config.max_model_len
        if context is not None:
            asked = min(asked, context - r.prompt_tokens)
        return max(asked, r.max_new_tokens)

    def preempted(self, seqs: tuple[Sequence, ...]) -> None:
        """Sequences that lost their blocks while the engine planned its step."""
        for seq in seqs:
            reader = self.instant_readers.get(seq.id)
            if reader is not None:
                reader.preempted(len(seq.output))
                seq.emits_tokens = True  # the next run's first token is an event again

    def committed(self, events: list[Event], now: float, from_step: bool = True) -> None:
        """Book what the engine did at `now`, then deliver the events to the
        streams once the delivery delay has passed. `from_step` is False for events of
        no step's delivery: cancels with nothing to compute, a prefill pass's tokens."""
        clients, left = self.clients, self.left
        for event in events:
            if type(event) is TokenEvent:
                if event.seq_id in left:
                    o = clients[event.seq_id].outcome
                    if now > o.left_s:
                        o.tokens_after_leave += 1
            else:
                o = clients[event.seq_id].outcome
                o.tokens_generated = event.num_generated
                if o.finish_reason is None:  # a drop names the reason first
                    o.finish_reason = event.reason.value
        delay = self.overheads.delivery_s
        if delay:
            self.env.timeout(delay).callbacks.append(lambda _: self.deliver(events, from_step))
        else:
            self.deliver(events, from_step)

    def deliver(self, events: list[Event], from_step: bool) -> None:
        now = self.env.now
        clients, instant, backlogged = self.clients, self.instant_readers, self.backlogged
        if from_step:
            step_times = self.step_times
            step_index = len(step_times)
            step_times.times.append(now)
            step_times.forget_unneeded(self._first_steps_of_runs)
            due = self.leaving.pop(step_index, None)
            if due:
                self._leave_at_step(due)
        for event in events:
            is_token = type(event) is TokenEvent
            if is_token:
                # An instant reader takes its token as it arrives: nothing queues for
                # it, so there is no stream to fill and nothing for the policy to see;
                # its token times are the steps' (see SimClient).
                reader = instant.get(event.seq_id)
                if reader is not None:
                    index = event.index
                    starts = reader.starts_run(index)
                    if starts:
                        reader.new_run(index, step_index)
                    if index == reader.leaves_after_index:
                        reader.leave()
                    elif starts:
                        self._quiet(reader, index, step_index)
                    continue
            client = clients[event.seq_id]
            connection = client.connection
            if self.unheard and event.seq_id in self.unheard:
                # the write of this event fails: the server learns the client left
                self.unheard.discard(event.seq_id)
                self._disconnected(client)
                if not is_token:
                    self._ended(client)
                continue
            if connection.closed:
                self.events_discarded += 1
                if not is_token:
                    self._ended(client)
                continue
            if is_token:
                size = self.token_bytes
            else:
                connection.close(now)
                if instant.pop(event.seq_id, None) is not None:
                    client.ended = True
                    client.read_final(now)
                    continue
                size = self.final_bytes
            connection.put(event, size, now)
            client.notify()
            if not is_token:
                self.watchdog.watch_cut(client)
                self._ended(client)
            if connection.queue and client not in backlogged:
                backlogged[client] = None
                self.watchdog.watch_stall(client)
        if backlogged:
            for client in list(backlogged):
                self._decide(client, now)

    def steps_before_a_leave(self) -> float:
        """How many of the next steps deliver no instant reader's leaving token."""
        return min(self.leaving, default=math.inf) - len(self.step_times)

    def until_drained(self) -> simpy.Event:
        """An event that fires when no server-side queue holds anything."""
        self._drained = self.env.event()
        return self._drained

    # -- from the clients -------------------------------------------------------

    def after_take(self, client: Reader) -> None:
        if not client.connection.queue:
            self._unbacklog(client)
        self._decide(client, self.env.now)

    def finished(self, client: Reader) -> None:
        """The client reads nothing more: its record is whole if the engine has
        ended its sequence, or never had it."""
        if client.ended or client.connection is None:
            self._settle(client)

    def client_left(self, client: Reader) -> None:
        self.left.add(client.request.id)
        if self.instant_readers.pop(client.request.id, None) is not None:
            seq = self.core.sequence(client.request.id)
            if seq is not None:
                seq.emits_tokens = True  # what it makes now goes to the connection
        if not self.listens and not client.connection.queue:
            # a writer blocked on the full connection learns at once, as its write ends
            self.unheard.add(client.request.id)
            return
        delay = self.overheads.disconnect_detect_s
        if delay:
            self.env.timeout(delay).callbacks.append(lambda _: self._disconnected(client))
        else:
            self._disconnected(client)

    # -- inside -----------------------------------------------------------------

    def _ended(self, client: Reader) -> None:
        """The engine's final event for the stream is delivered (to the connection,
        or discarded)."""
        client.ended = True
        if client.done:
            self._settle(client)

    def _settle(self, client: Reader) -> None:
        seq_id = client.request.id
        self.clients.pop(seq_id, None)
        self.left.discard(seq_id)
        self.unheard.discard(seq_id)
        self.settled(client)

    def _first_steps_of_runs(self):
        """The step each instant reader still reading began its first run with:
        its token times are steps from there on."""
        return (reader.runs[0][1] for reader in self.instant_readers.values() if reader.runs)

    def _quiet(self, reader: Reader, index: int, step: int) -> None:
        """A run of an instant reader's tokens began with token `index` at `step`: its
        sequence makes one token a step until the run ends, so its tokens need no
        events, and the token it leaves after comes with a step known now. (A
        sequence that finished with that token has no run to quiet, and one
        preempted before the token was delivered has ended the run already: its
        next run must be seen.)"""
        seq = self.core.sequence(reader.request.id)
        if seq is None or reader.run_end is not None:
            return
        seq.emits_tokens = False
        leaves = reader.leaves_after_index
        if leaves > index:
            self.leaving.setdefault(step + leaves - index, []).append((reader, len(reader.runs)))

    def _leave_at_step(self, due: list[tuple[Reader, int]]) -> None:
        """Readers whose leaving token this step delivers, unless their run ended."""
        for reader, runs in due:
            if (reader.request.id in self.instant_readers and len(reader.runs) == runs
                    and reader.run_end is None):
                reader.leave()

    def _disconnected(self, client: Reader) -> None:
        """The server notices the client has gone: it drops what it had not sent and,
        if the sequence is still going, cancels it, or with a resume grace pauses it
        and cancels it when the grace runs out."""
        connection = client.connection
        connection.discard_queue()
        self._unbacklog(client)
        if not connection.closed:
            connection.close(self.env.now)
            seq_id = client.request.id
            if self.resume_grace_s:
                self.core.pause(seq_id)
                self.env.timeout(self.resume_grace_s).callbacks.append(
                    lambda _: self._grace_over(seq_id))
            else:
                self.core.cancel(seq_id)
            self.wake()

    def _grace_over(self, seq_id: str) -> None:
        """No GET came back for the stream: cancel it (harmless if it finished)."""
        self.core.cancel(seq_id)
        self.wake()

    def _decide(self, client: Reader, now: float) -> None:
        """Apply the policy to one stream. A closed stream has nothing left to
        decide: its sequence has finished or is being cancelled."""
        connection = client.connection
        if connection.closed:
            return
        decision = self.policy.decide(connection.backlog(), now)
        if decision is Decision.CONTINUE:
            return
        seq_id = client.request.id
        if decision is Decision.PAUSE:
            connection.paused = True
            self.core.pause(seq_id)
        elif decision is Decision.RESUME:
            connection.paused = False
            self.core.resume(seq_id)
        else:
            self._drop(client, now)
        self.wake()

    def _drop(self, client: Reader, now: float) -> None:
        """Cancel the sequence and end the stream with a `slow_client` final event,
        sent after everything already queued for it."""
        seq_id = client.request.id
        seq = self.core.sequence(seq_id)
        self.core.cancel(seq_id, FinishReason.SLOW_CLIENT)
        client.outcome.finish_reason = FinishReason.SLOW_CLIENT.value
        connection = client.connection
        connection.close(now)
        connection.put(FinishEvent(seq_id, FinishReason.SLOW_CLIENT, len(seq.output) if seq else 0),
                       self.final_bytes, now)
        client.notify()
        if not connection.queue:
            self._unbacklog(client)
        self.watchdog.watch_cut(client)

    def _cut(self, client: Reader) -> None:
        """Give up on a reader that takes nothing: its connection is dropped, with
        whatever the server still held for it."""
        client.connection.drop()
        self._unbacklog(client)
        self.readers_cut += 1
        client.cut()

    def _unbacklog(self, client: Reader) -> None:
        self.backlogged.pop(client, None)
        if not self.backlogged and self._drained is not None:
            drained, self._drained = self._drained, None
            drained.succeed()
