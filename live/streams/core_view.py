"""The core's state between two steps, as `/stats` and `/metrics` report it."""
from __future__ import annotations

from dataclasses import dataclass

from scheduler import CoreSnapshot, FinishReason, Scheduler

from .events import ABORTS


@dataclass(frozen=True, slots=True)
class CoreView:
    snapshot: CoreSnapshot
    admissions: int
    releases: int
    finished: dict[FinishReason, int]
    """Requests the core has finished, by reason."""

    @classmethod
    def of(cls, core: Scheduler) -> CoreView:
        """Only the stepping thread, between steps, sees one consistent state."""
        pool = core.pool
        return cls(core.snapshot(), pool.reservations, pool.releases,
                   dict(core.finished_by_reason))

    def as_dict(self) -> dict:
        return {
            **self.snapshot.as_dict(),
            "admissions": self.admissions,
            "releases": self.releases,
            "aborts": {r.value: self.finished.get(r, 0) for r in ABORTS},
            "finished": {r.value: n for r, n in self.finished.items()},
        }
