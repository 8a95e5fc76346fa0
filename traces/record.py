"""One request of a trace: when it arrives, what it asks for, and how its client
behaves. The same record drives the simulator and the live load generator."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


MAX_COUNT = 2**63 - 1
"""The largest count (of tokens, of time units) a trace may hold: what a 64-bit
integer holds, as the arrays of a replay do."""


class ReadMode(enum.Enum):
    INSTANT = "instant"
    """Takes every event as soon as it arrives."""
    PER_EVENT = "per_event"
    """Waits `pause_s` after each event it takes."""
    BYTE_RATE = "byte_rate"
    """Reads at most `bytes_per_s` from its connection."""


class LeaveHow(enum.Enum):
    FIN = "fin"
    """Closes the connection politely."""
    RST = "rst"
    """Vanishes: the connection is reset."""


@dataclass(frozen=True, slots=True)
class Client:
    read: ReadMode = ReadMode.INSTANT
    pause_s: float = 0.0
    bytes_per_s: float = 0.0
    leave_after_tokens: int | None = None
    leave_after_s: float | None = None
    leave_how: LeaveHow = LeaveHow.FIN

    @property
    def leaves(self) -> bool:
        return self.leave_after_tokens is not None or self.leave_after_s is not None

    @property
    def slow(self) -> bool:
        return self.read is not ReadMode.INSTANT


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """`prompt` is text, or None when only `prompt_tokens` (a count) is known; a
    driver then makes a prompt of that many tokens. Public traces give the output
    length, so replays set `ignore_eos` and make exactly `max_new_tokens`. `key`:
    the name (never the secret) of the API key the request comes with, which the
    per-key limits count (see `request_id.KEY_NAME`); None: it comes without one.

    `session`: the conversation (or virtual user) the request belongs to, as load
    tools run "concurrency N" and chat users come back: the requests of a session
    are sent one after another, each `think_s` after its client was done with the
    one before (read it to its end, left, or was refused), and not before its own
    `arrival_s`; a slow reader delays its own next request. The first request of a
    session goes at its `arrival_s` (its `think_s` is not used). None: an open-loop
    request, sent at its `arrival_s` whatever else happens."""

    id: str
    arrival_s: float
    prompt_tokens: int
    max_new_tokens: int
    prompt: str | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    ignore_eos: bool = True
    client: Client = field(default_factory=Client)
    key: str | None = None
    session: str | None = None
    think_s: float = 0.0
