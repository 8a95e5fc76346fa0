"""A snapshot of the core's state between steps."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class CoreSnapshot:
    step: int
    running: int
    waiting: int
    paused: int
    blocks_free: int
    blocks_reserved: int
    blocks_used: int
    inbox: int
    preemptions: int = 0
    """Sequences preempted for blocks since the core was built."""
    recomputed_tokens: int = 0
    """Tokens prefilled again for re-admitted sequences since the core was built."""
    overtakes: int = 0
    """Admissions ahead of a waiting request that arrived earlier and did not fit."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def __reduce__(self):
        # pickled after every step by an engine in a process of its own: by value, not
        # through dataclasses' field lookups
        return type(self), tuple(getattr(self, name) for name in self.__slots__)
