"""The engine's state between two steps, as `/stats`, `/metrics` and `/v1/engine`
report it: taken by the stepping thread, the one that sees a consistent state, and
handed on behind the step's output (from the engine's process, if it has one)."""
from __future__ import annotations

from dataclasses import dataclass

from scheduler import CoreSnapshot, FinishReason, KeyHolding

from .engine import Engine

ABORTS = (FinishReason.CANCELLED, FinishReason.SLOW_CLIENT, FinishReason.ERROR)


@dataclass(frozen=True, slots=True)
class CoreView:
    snapshot: CoreSnapshot
    admissions: int
    releases: int
    finished: dict[FinishReason, int]
    """Requests the core has finished, by reason."""
    holding: dict[str, KeyHolding]
    """Each key that holds something, and what."""
    last_step: int
    """The newest step in the step log's ring."""
    step_log_errors: int

    @classmethod
    def of(cls, engine: Engine) -> CoreView:
        """Only the stepping thread, between steps, sees one consistent state."""
        core = engine.core
        pool = core.pool
        return cls(core.snapshot(), pool.reservations, pool.releases,
                   dict(core.finished_by_reason), core.keys.holding(),
                   engine.step_log.last_step, engine.step_log.write_errors)

    def __reduce__(self):
        # pickled after every step by an engine in a process of its own
        return type(self), tuple(getattr(self, name) for name in self.__slots__)

    def as_dict(self) -> dict:
        return {
            **self.snapshot.as_dict(),
            "admissions": self.admissions,
            "releases": self.releases,
            "aborts": {r.value: self.finished.get(r, 0) for r in ABORTS},
            "finished": {r.value: n for r, n in self.finished.items()},
        }
