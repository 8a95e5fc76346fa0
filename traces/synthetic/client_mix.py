"""How the clients of a generated trace behave: a fraction read slowly, a fraction
leave early, the rest take every event at once and stay to the end."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..record import Client, LeaveHow, ReadMode


@dataclass(frozen=True, slots=True)
class ClientMix:
    """`slow` of the clients wait `slow_pause_s` after each event, or read at most
    `slow_bytes_per_s` (give exactly one). `leave` of them leave after
    `leave_after_tokens` tokens and/or `leave_after_s` seconds, by `leave_how`.

    Fractions become whole counts (the nearest), and the clients that get them are
    chosen at random; slow readers and leavers are chosen independently, so a client
    may be both. A setting without its fraction is refused, as it could not apply.
    """

    slow: float = 0.0
    slow_pause_s: float | None = None
    slow_bytes_per_s: float | None = None
    leave: float = 0.0
    leave_after_tokens: int | None = None
    leave_after_s: float | None = None
    leave_how: LeaveHow = LeaveHow.FIN

    def __post_init__(self):
        for name in ("slow", "leave"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be a fraction in [0, 1], got {getattr(self, name)}")
        slow_settings = [s for s in (self.slow_pause_s, self.slow_bytes_per_s) if s is not None]
        if self.slow and len(slow_settings) != 1:
            raise ValueError("slow readers need exactly one of slow_pause_s and slow_bytes_per_s")
        if not self.slow and slow_settings:
            raise ValueError("slow_pause_s or slow_bytes_per_s given, but the slow fraction is 0")
        if any(s <= 0 for s in slow_settings):
            raise ValueError("slow_pause_s and slow_bytes_per_s must be positive")
        leave_settings = [s for s in (self.leave_after_tokens, self.leave_after_s) if s is not None]
        if self.leave and not leave_settings:
            raise ValueError("leavers need leave_after_tokens or leave_after_s (or both)")
        if not self.leave and (leave_settings or self.leave_how is not LeaveHow.FIN):
            raise ValueError("a leave setting is given, but the leave fraction is 0")
        if any(s < 0 for s in leave_settings):
            raise ValueError("leave_after_tokens and leave_after_s must be >= 0")

    def _slow_reader(self) -> dict:
        if self.slow_pause_s is not None:
            return {"read": ReadMode.PER_EVENT, "pause_s": self.slow_pause_s}
        return {"read": ReadMode.BYTE_RATE, "bytes_per_s": self.slow_bytes_per_s}

    def _leaver(self) -> dict:
        return {"leave_after_tokens": self.leave_after_tokens, "leave_after_s": self.leave_after_s,
                "leave_how": self.leave_how}

    def assign(self, n: int, rng: np.random.Generator) -> list[Client]:
        """The clients of `n` requests, in request order."""
        slow = set(rng.choice(n, size=round(self.slow * n), replace=False).tolist())
        leave = set(rng.choice(n, size=round(self.leave * n), replace=False).tolist())
        return [Client(**(self._slow_reader() if i in slow else {}),
                       **(self._leaver() if i in leave else {}))
                for i in range(n)]
