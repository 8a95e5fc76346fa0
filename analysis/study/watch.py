"""What the server holds while a study runs, which the clients' records do not say:
on the simulated side a probe that looks at the core between its steps, on the live
side `/stats` read in a thread, and the live server's own record of each request."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx
import simpy

from scheduler import Scheduler

from ..compare import Comparison
from ..live_target import LiveTarget


@dataclass
class CoreWatch:
    """A `sim.replay` probe: every `interval_s` of virtual time, whether each of
    `ids` is in the core and how many tokens it has made. It ends once every one of
    them has come and gone, or at `horizon_s`."""

    ids: list[str]
    interval_s: float = 0.005
    horizon_s: float = 3600.0
    released_s: dict[str, float] = field(default_factory=dict)
    """When each request left the core (its slot and blocks released), to `interval_s`."""
    made: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """(time, tokens made so far) for each request while it was in the core."""

    def __call__(self, env: simpy.Environment, core: Scheduler):
        seen: set[str] = set()
        while len(self.released_s) < len(self.ids) and env.now < self.horizon_s:
            for seq_id in self.ids:
                seq = core.sequence(seq_id)
                if seq is not None:
                    seen.add(seq_id)
                    self.made.setdefault(seq_id, []).append((env.now, len(seq.output)))
                elif seq_id in seen and seq_id not in self.released_s:
                    self.released_s[seq_id] = env.now
            yield env.timeout(self.interval_s)


class StatsWatch:
    """The live server's `/stats`, read every `interval_s` in a thread while the
    block runs: the peaks of what it holds."""

    def __init__(self, target: LiveTarget, interval_s: float = 0.05):
        key = target.access.admin_key
        self._http = httpx.Client(base_url=target.url, timeout=5.0, trust_env=False,
                                  headers={"Authorization": f"Bearer {key}"} if key else None)
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict]] = []
        """(time.time(), /stats)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def peak(self, name: str) -> int:
        return max((stats.get(name, 0) for _, stats in self.samples), default=0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), self._http.get("/stats").json()))
            except (httpx.HTTPError, ValueError):
                pass
            self._stop.wait(self.interval_s)

    def __enter__(self) -> StatsWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._http.close()


def live_records(c: Comparison) -> dict[str, dict]:
    """The live server's record of each request, by trace id, its times in seconds
    from the replay's start."""
    out = {}
    for record in c.records:
        trace_id = record["id"].split("-", 2)[2]  # named `twin-<hex>-<trace id>`
        out[trace_id] = {k: (v - c.started_unix if k.endswith("_unix") and v is not None else v)
                         for k, v in record.items()}
    return out
