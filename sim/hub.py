"""The server side of every stream, the simulated twin of the live hub: it hands
each step's events to the streams, applies the backlog policy, and turns drops and
client disconnects into cancels in the core's inbox."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import simpy

from scheduler import (BacklogPolicy, Decision, Event, FinishEvent, FinishReason, Request,
                       Scheduler, StepPlan, TokenEvent)

from .overheads import Overheads
from .transport import Stream
from .wire import WireFormat

if TYPE_CHECKING:
    from .client import SimClient


class Hub:
    def __init__(self, env: simpy.Environment, core: Scheduler, policy: BacklogPolicy,
                 overheads: Overheads, wire: WireFormat, wake: Callable[[], None]):
        self.env = env
        self.core = core
        self.policy = policy
        self.overheads = overheads
        self.token_bytes = wire.token_bytes
        self.final_bytes = wire.final_bytes
        self.wake = wake
        """Wakes the engine loop if it sleeps: every wish goes with one."""
        self.engine_waits = policy.engine_waits
        self.clients: dict[str, SimClient] = {}
        self.backlogged: set[SimClient] = set()
        """Clients whose server-side queue is not empty."""
        self.events_discarded = 0
        """Events the engine made for streams the server had already closed."""
        self._drained: simpy.Event | None = None

    def open(self, client: SimClient) -> None:
        """Submit the client's request; a refusal propagates before the stream opens."""
        r = client.request
        self.core.submit(Request(r.id, r.prompt_tokens, r.max_new_tokens))
        client.stream = Stream(self.overheads.transport_bytes, self.env.now)
        self.clients[r.id] = client
        self.wake()

    # -- from the engine --------------------------------------------------------

    def admitted(self, plan: StepPlan, now: float) -> None:
        for seq in plan.prefills:
            self.clients[seq.id].outcome.admitted_s = now

    def committed(self, events: list[Event], now: float) -> None:
        """Book what the engine did at `now`, then deliver the events to the
        streams once the delivery delay has passed."""
        clients = self.clients
        for event in events:
            o = clients[event.seq_id].outcome
            if type(event) is TokenEvent:
                if event.index == 0:
                    o.first_token_engine_s = now
                if o.left_s is not None and now > o.left_s:
                    o.tokens_after_leave += 1
            else:
                o.tokens_generated = event.num_generated
                if o.finish_reason is None:  # a drop names the reason first
                    o.finish_reason = event.reason.value
        delay = self.overheads.delivery_s
        if delay:
            self.env.timeout(delay).callbacks.append(lambda _: self.deliver(events))
        else:
            self.deliver(events)

    def deliver(self, events: list[Event]) -> None:
        now = self.env.now
        clients, token_bytes = self.clients, self.token_bytes
        for event in events:
            client = clients[event.seq_id]
            stream = client.stream
            if stream.closed:
                self.events_discarded += 1
                continue
            final = type(event) is not TokenEvent
            if final:
                stream.closed = True
            if client.instant and not client.done:
                # Nothing ever queues for it, so there is no stream to fill and
                # nothing for the policy to see.
                client.read(event, now)
                continue
            stream.put(event, self.final_bytes if final else token_bytes, now)
            client.notify()
            if stream.queue:
                self.backlogged.add(client)
        for client in list(self.backlogged):
            self._decide(client, now)

    def until_drained(self) -> simpy.Event:
        """An event that fires when no server-side queue holds anything."""
        self._drained = self.env.event()
        return self._drained

    # -- from the clients -------------------------------------------------------

    def after_take(self, client: SimClient) -> None:
        if not client.stream.queue:
            self._unbacklog(client)
        self._decide(client, self.env.now)

    def client_left(self, client: SimClient) -> None:
        delay = self.overheads.disconnect_detect_s
        if delay:
            self.env.timeout(delay).callbacks.append(lambda _: self._disconnected(client))
        else:
            self._disconnected(client)

    # -- inside -----------------------------------------------------------------

    def _disconnected(self, client: SimClient) -> None:
        """The server notices the client has gone: it drops what it had not sent and,
        if the sequence is still going, cancels it."""
        stream = client.stream
        stream.discard_queue()
        self._unbacklog(client)
        if not stream.closed:
            stream.closed = True
            self.core.cancel(client.request.id)
            self.wake()

    def _decide(self, client: SimClient, now: float) -> None:
        """Apply the policy to one stream. A closed stream has nothing left to
        decide: its sequence has finished or is being cancelled."""
        stream = client.stream
        if stream.closed:
            return
        decision = self.policy.decide(stream.backlog(), now)
        if decision is Decision.CONTINUE:
            return
        seq_id = client.request.id
        if decision is Decision.PAUSE:
            stream.paused = True
            self.core.pause(seq_id)
        elif decision is Decision.RESUME:
            stream.paused = False
            self.core.resume(seq_id)
        else:
            self._drop(client, now)
        self.wake()

    def _drop(self, client: SimClient, now: float) -> None:
        """Cancel the sequence and end the stream with a `slow_client` final event,
        sent after what is already in the connection."""
        seq_id = client.request.id
        seq = self.core.sequence(seq_id)
        self.core.cancel(seq_id, FinishReason.SLOW_CLIENT)
        client.outcome.finish_reason = FinishReason.SLOW_CLIENT.value
        stream = client.stream
        stream.discard_queue()
        stream.closed = True
        stream.put(FinishEvent(seq_id, FinishReason.SLOW_CLIENT, len(seq.output) if seq else 0),
                   self.final_bytes, now)
        client.notify()
        if not stream.queue:
            self._unbacklog(client)

    def _unbacklog(self, client: SimClient) -> None:
        self.backlogged.discard(client)
        if not self.backlogged and self._drained is not None:
            drained, self._drained = self._drained, None
            drained.succeed()
