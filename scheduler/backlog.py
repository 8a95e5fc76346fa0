"""Backlog policies: what to do with a stream whose reader falls behind. Pure
decisions over a snapshot of the stream's queue, the same objects in the live hub
and in the simulator."""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Decision(enum.Enum):
    CONTINUE = "continue"
    PAUSE = "pause"
    RESUME = "resume"
    DROP = "drop"
    """Cancel the sequence and tell the client `slow_client`."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """A stream's queue as the driver sees it at time `now` (seconds, any origin).
    `last_read` is when the reader last took an event, or when the oldest event
    now queued arrived if that is later: the start of the current stall."""

    queued_events: int
    queued_bytes: int
    last_read: float
    paused: bool = False

    def stalled_for(self, now: float) -> float:
        return now - self.last_read if self.queued_events else 0.0


class BacklogPolicy:
    name: str = ""
    engine_waits: bool = False
    """True when the step loop must not start a step while this stream has queued
    events: the head-of-line blocking a server that awaits each write gets."""

    stall_check_interval_s: float | None = None
    """How often a driver looks for stalls that end the policy's patience while no
    event arrives; None when the policy never drops."""

    def decide(self, backlog: Backlog, now: float) -> Decision:
        raise NotImplementedError


class Naive(BacklogPolicy):
    """The engine waits for the reader. Kept to show why not."""

    name = "naive"
    engine_waits = True

    def decide(self, backlog: Backlog, now: float) -> Decision:
        return Decision.CONTINUE


class Unbounded(BacklogPolicy):
    """Queue everything; memory grows with the slowest reader."""

    name = "unbounded"

    def decide(self, backlog: Backlog, now: float) -> Decision:
        return Decision.CONTINUE


@dataclass(frozen=True)
class Pause(BacklogPolicy):
    """Leave the sequence out of the batch while more than `max_queued` events wait;
    put it back once the reader is down to `resume_at` (hysteresis)."""

    max_queued: int = 64
    resume_at: int | None = None
    name = "pause"

    def __post_init__(self):
        if self.max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        if self.resume_at is not None and not 0 <= self.resume_at < self.max_queued:
            raise ValueError("resume_at must be below max_queued")

    def decide(self, backlog: Backlog, now: float) -> Decision:
        return _pause_or_resume(backlog, self.max_queued, self.resume_at)


class StallTimeout(BacklogPolicy):
    """A policy that drops a stream whose stall outlasts `stall_timeout_s`. A stall
    can outlast it while no event arrives (the stream paused, the engine idle), so
    the driver also looks for stalls on a watchdog that ticks every
    `stall_check_interval_s`: a quarter of the timeout, between 10 ms and 1 s, so
    that a drop comes at most that late."""

    stall_timeout_s: float

    @property
    def stall_check_interval_s(self) -> float:
        return min(1.0, max(0.01, self.stall_timeout_s / 4))

    def __post_init__(self):
        if not self.stall_timeout_s > 0:
            raise ValueError("stall_timeout_s must be positive")


@dataclass(frozen=True)
class Drop(StallTimeout):
    """Cancel the stream once its reader has taken nothing for `stall_timeout_s`
    while events wait."""

    stall_timeout_s: float = 5.0
    name = "drop"

    def decide(self, backlog: Backlog, now: float) -> Decision:
        if backlog.stalled_for(now) > self.stall_timeout_s:
            return Decision.DROP
        return Decision.CONTINUE


@dataclass(frozen=True)
class PauseThenDrop(StallTimeout):
    """Pause above `max_queued`; if the stall outlasts `stall_timeout_s`, cancel."""

    max_queued: int = 64
    stall_timeout_s: float = 5.0
    resume_at: int | None = None
    name = "pause_then_drop"

    def __post_init__(self):
        Pause.__post_init__(self)  # same thresholds, same checks
        super().__post_init__()

    def decide(self, backlog: Backlog, now: float) -> Decision:
        if backlog.stalled_for(now) > self.stall_timeout_s:
            return Decision.DROP
        return _pause_or_resume(backlog, self.max_queued, self.resume_at)


def _pause_or_resume(backlog: Backlog, max_queued: int, resume_at: int | None) -> Decision:
    low = max_queued // 2 if resume_at is None else resume_at
    if backlog.paused:
        return Decision.RESUME if backlog.queued_events <= low else Decision.CONTINUE
    return Decision.PAUSE if backlog.queued_events > max_queued else Decision.CONTINUE


BACKLOG_POLICIES: dict[str, type[BacklogPolicy]] = {
    cls.name: cls for cls in (Naive, Unbounded, Pause, Drop, PauseThenDrop)}


def make_policy(name: str, **params) -> BacklogPolicy:
    """A policy by name; parameters a policy does not take are ignored, so one set
    of command-line settings serves every policy."""
    try:
        cls = BACKLOG_POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown backlog policy {name!r}; choose from {sorted(BACKLOG_POLICIES)}") from None
    fields = getattr(cls, "__dataclass_fields__", {})
    return cls(**{k: v for k, v in params.items() if k in fields and v is not None})
