"""A simulated client: it sends its request (paying the per-request overhead), then
reads its stream at its own pace and may leave after N tokens or T seconds.

An instant reader takes each event the moment it arrives, so the hub hands events
to it directly; only slower readers need a reading process. Once it has left, its
events go to its connection like anyone's, and stay there unread.

Nothing ever queues for an instant reader, so its sequence is never paused: from
its first token on, every step makes one token for it, and it takes them as the
steps are delivered, until a preemption (optimistic admission) leaves it out of
some steps. Its token times are therefore runs of the hub's step delivery times
(`Server.step_times`): it notes the step and token index where each run starts, and
turns them into times when its stream ends or it leaves, rather than one by one.
A token that a prefill pass made before its step ended keeps its own time.

It tells the server when it is done (refused, left, or read the last event): the
server settles its record once the engine has ended its sequence too."""
from __future__ import annotations

from typing import Callable, Protocol

import simpy

from scheduler import (FinishReason, InvalidRequest, KeyLimitReached, QueueFull, RequestTooLarge,
                       SubmitRefused, TokenEvent)
from traces.outcome import Refusal, RequestOutcome
from traces.record import ReadMode, TraceRequest

from .connection import Connection
from .step_times import StepTimes

REFUSALS = {QueueFull: Refusal.QUEUE_FULL, KeyLimitReached: Refusal.KEY_LIMIT,
            RequestTooLarge: Refusal.TOO_LARGE, InvalidRequest: Refusal.INVALID}
"""The outcome's name for each refusal of the core, as the live client names the
HTTP status the server answers it with."""


class Server(Protocol):
    """The server side of a client's stream (the hub), as the client sees it."""

    step_times: StepTimes

    def taken_in(self) -> float:
        """Seconds from now until a request that arrives now reaches `open`."""

    def open(self, client: SimClient) -> None:
        """Submit the request and open its connection; raises the core's refusal."""

    def after_take(self, client: SimClient) -> None:
        """The client has taken an event off its connection."""

    def client_left(self, client: SimClient) -> None:
        """The client has closed its connection."""

    def finished(self, client: SimClient) -> None:
        """The client reads nothing more."""


def check_reader(request: TraceRequest) -> None:
    """Refuse a reading behaviour the simulated client cannot follow."""
    behaviour = request.client
    if behaviour.read is ReadMode.BYTE_RATE and not behaviour.bytes_per_s > 0:
        raise ValueError(f"request {request.id!r}: a byte-rate reader needs bytes_per_s > 0")
    if behaviour.pause_s < 0:
        raise ValueError(f"request {request.id!r}: pause_s must be >= 0")


class SimClient:
    """Fills its `RequestOutcome` as the live client would: token times are when
    this client read each event. `finish_s` is when it read the stream's last event,
    or when it left."""

    __slots__ = ("env", "request", "behaviour", "server", "instant",
                 "leave_after_tokens", "leaves_after_index", "outcome", "connection", "done",
                 "ended", "runs", "cuts", "early", "on_done", "_readable")

    def __init__(self, env: simpy.Environment, request: TraceRequest, server: Server,
                 on_done: Callable[[SimClient], None] | None = None):
        """`on_done`: told when the client is done (its session's next request may go)."""
        behaviour = request.client
        self.env = env
        self.on_done = on_done
        self.request = request
        self.behaviour = behaviour
        self.server = server
        self.instant = behaviour.read is ReadMode.INSTANT
        self.leave_after_tokens = behaviour.leave_after_tokens
        self.leaves_after_index = (behaviour.leave_after_tokens or 0) - 1
        """The index of the token after which it leaves; -1 if no token count makes it leave."""
        self.outcome = RequestOutcome(request.id, request.arrival_s, request.prompt_tokens,
                                      request.max_new_tokens)
        self.connection: Connection | None = None
        """Set by the hub when the request is accepted."""
        self.done = False
        """Reads nothing more: refused, left, or read the last event."""
        self.ended = False
        """Set by the hub when the stream's final event from the engine is delivered."""
        self.runs: list[tuple[int, int]] = []
        """An instant reader's (token index, step) where each run of one token a
        step begins (see the module)."""
        self.cuts: list[int] = []
        """The tokens made when each preemption took the sequence's blocks: a run
        begins at token 0 and at each of these. A preemption can come before the
        delivery of the token that began its run (delivery waits `delivery_s`
        after the step), so a run's end is known from these, not from the order
        of events."""
        self.early: dict[int, float] | None = None
        """An instant reader's tokens taken before their step's delivery (those of a
        prefill pass that ended before its step), by index: when it took them."""
        self._readable: simpy.Event | None = None

    def run(self):
        env, behaviour = self.env, self.behaviour
        if behaviour.leave_after_s is not None:
            env.timeout(behaviour.leave_after_s).callbacks.append(lambda _: self.leave())
        delay = self.server.taken_in()
        if delay:
            yield env.timeout(delay)
        if self.done:
            return  # left before the request was sent
        # The server answers with headers once it has the request, before admission
        # (a refusal is an answer too).
        self.outcome.headers_s = env.now
        try:
            self.server.open(self)
        except SubmitRefused as refusal:
            self.outcome.refused = REFUSALS[type(refusal)].value
            self.outcome.finish_s = env.now
            self.done = True
            self._finished()
            return
        if behaviour.leave_after_tokens == 0:
            self.leave()
        elif not self.instant:
            yield from self._read()

    def notify(self) -> None:
        """The hub has put events in the connection (of a reader with a process)."""
        if self._readable is not None and not self.done:
            readable, self._readable = self._readable, None
            readable.succeed()

    def leave(self) -> None:
        """Close the connection (FIN or RST: the sim treats both alike). What is in
        the connection stays unread; the server learns of it after a delay."""
        if self.done:
            return
        o = self.outcome
        o.left_s = o.finish_s = self.env.now
        self.done = True
        if self.instant and self.runs:
            index, step = self.runs[-1]
            taken = index + len(self.server.step_times) - step
            self._took_steps(taken if self.run_end is None else min(taken, self.run_end))
        if self.connection is None:
            o.finish_reason = FinishReason.CANCELLED.value  # never reached the engine
        else:
            self.server.client_left(self)
        self._finished()

    def cut(self) -> None:
        """The server dropped the connection (the reader made no progress for the
        stall timeout): it reads nothing more, and its stream ends for it now."""
        if self.done:
            return
        self.outcome.finish_s = self.env.now
        self.done = True
        self._finished()

    def _read(self):
        env, connection, behaviour = self.env, self.connection, self.behaviour
        per_event = behaviour.read is ReadMode.PER_EVENT
        while not self.done:
            if not connection.buffer:
                self._readable = env.event()
                yield self._readable
                continue
            if not per_event:
                connection.reading = True
                yield env.timeout(connection.head_bytes() / behaviour.bytes_per_s)
                if self.done:
                    return
            if type(connection.take(env.now)) is TokenEvent:
                self.read_token(env.now)
            else:
                self.read_final(env.now)
            self.server.after_take(self)
            if per_event and not self.done:
                yield env.timeout(behaviour.pause_s)

    def read_token(self, now: float) -> None:
        """Take a token event off the connection (a reader with a process)."""
        o = self.outcome
        if not o.tokens_read:
            o.first_token_client_s = now
        o.token_times_s.append(now)
        o.tokens_read += 1
        if o.tokens_read == self.leave_after_tokens:
            self.leave()

    def read_final(self, now: float) -> None:
        """Take the stream's final event off the connection. An instant reader has
        taken every token the engine made for it."""
        o = self.outcome
        if self.instant and o.tokens_generated:
            self._took_steps(o.tokens_generated)
        o.finish_s = now
        self.done = True
        self._finished()

    def _finished(self) -> None:
        self.server.finished(self)
        if self.on_done is not None:
            self.on_done(self)

    def starts_run(self, index: int) -> bool:
        """Whether token `index` is the first of a run."""
        return index == 0 or index in self.cuts

    @property
    def run_end(self) -> int | None:
        """Where the last run begun ends, if its sequence was preempted since."""
        start = self.runs[-1][0] if self.runs else 0
        return min((c for c in self.cuts if c > start), default=None)

    def new_run(self, index: int, step: int) -> None:
        """Token `index` came with `step`: a run of one token a step begins."""
        self.runs.append((index, step))

    def took_early(self, index: int, at: float) -> None:
        """Token `index` came at `at`, before the delivery of its step."""
        if self.early is None:
            self.early = {}
        self.early[index] = at

    def preempted(self, tokens: int) -> None:
        """The sequence lost its blocks after making `tokens`: the run ends there,
        and the next begins with the token it makes when re-admitted."""
        self.cuts.append(tokens)

    def _took_steps(self, tokens: int) -> None:
        """An instant reader's record of the `tokens` it took, one per step within
        each run."""
        o = self.outcome
        steps, runs = self.server.step_times, self.runs
        ends = [index for index, _ in runs[1:]] + [tokens]
        o.token_times_s = [t for (index, step), end in zip(runs, ends)
                           for t in steps.between(step, step + end - index)]
        if self.early:
            for index, at in self.early.items():
                if index < len(o.token_times_s):
                    o.token_times_s[index] = at
        o.first_token_client_s = o.token_times_s[0]
        o.tokens_read = tokens
