"""The simulated hub's watchdog, the twin of the live hub's: it ticks at multiples
of the policy's `stall_check_interval_s` on the virtual clock, since a stall can
outlast the timeout while no step runs (the stream paused, the engine idle). Only
the ticks that can act are scheduled: a backlogged stream is checked at the first
tick after its stall, as it stands, would outlast the timeout, and the policy
decides there; the reader of a closed stream (final event queued, or dropped) is
checked at the first tick after it would have made no progress for the timeout,
and cut there if it has made none."""
from __future__ import annotations

import math
from typing import Callable, Protocol

import simpy

from scheduler import BacklogPolicy

from .connection import Connection


class Reader(Protocol):
    """A client at the other end of a stream, as the watchdog sees it."""

    connection: Connection
    done: bool
    """Reads nothing more."""


class Watchdog:
    def __init__(self, env: simpy.Environment, policy: BacklogPolicy,
                 backlogged: dict[Reader, None], decide: Callable[[Reader, float], None],
                 cut: Callable[[Reader], None]):
        """`backlogged`: the hub's clients with a server-side queue; `decide` applies
        the policy to one, `cut` gives up on a reader. Under a policy that never
        drops, nothing is watched."""
        self.env = env
        self.policy = policy
        self.interval = policy.stall_check_interval_s
        self.backlogged = backlogged
        self.decide = decide
        self.cut = cut
        self._stall_checks: set[Reader] = set()
        """Clients with a stall check scheduled: at most one each."""

    def watch_stall(self, client: Reader) -> None:
        """Check a backlogged stream at the first tick after its stall outlasts the
        timeout. A check already scheduled is no later than that, since a stall
        only ever starts later: it looks, and schedules the next one."""
        if self.interval is None or client in self._stall_checks:
            return
        self._stall_checks.add(client)
        self._at_tick_after(client.connection.backlog().last_read + self.policy.stall_timeout_s,
                            lambda: self._check_stall(client))

    def _check_stall(self, client: Reader) -> None:
        self._stall_checks.discard(client)
        if client not in self.backlogged or client.connection.closed:
            return  # the reader caught up or the stream ended: nothing to watch
        self.decide(client, self.env.now)
        if not client.connection.closed:
            self.watch_stall(client)

    def watch_cut(self, client: Reader) -> None:
        """Check the reader of a closed stream at the first tick after it would
        have made no progress for the timeout."""
        if self.interval is None or client.done:
            return
        start = client.connection.stall_start(self.env.now)
        if start is not None:
            self._at_tick_after(start + self.policy.stall_timeout_s,
                                lambda: self._check_cut(client))

    def _check_cut(self, client: Reader) -> None:
        if client.done:
            return
        now = self.env.now
        start = client.connection.stall_start(now)
        if start is not None and now - start > self.policy.stall_timeout_s:
            self.cut(client)
        else:
            self.watch_cut(client)

    def _at_tick_after(self, due: float, check: Callable[[], None]) -> None:
        """`check()` at the first tick after `due`, and after now."""
        now, interval = self.env.now, self.interval
        tick = (math.floor(max(now, due) / interval) + 1) * interval
        if tick <= now:  # float rounding
            tick += interval
        self.env.timeout(tick - now).callbacks.append(lambda _: check())
