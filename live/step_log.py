"""The calibration record: one JSON line per engine step with the plan's
features and how long the step took. The simulator fits its cost model from it:
`[json.loads(l) for l in open(path)]` is all it takes to read."""
from __future__ import annotations

import json
import threading
import time
from typing import IO

from scheduler import PlanFeatures


class StepLog:
    def __init__(self, path: str, device: str, meta: dict | None = None):
        self.path = path
        self._device = device
        self._meta = meta or {}
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(path, "w", buffering=1 << 16)

    def record(self, step: int, start_s: float, duration_s: float, features: PlanFeatures,
               **counts: int) -> None:
        """`start_s` is on the engine's own clock; `start_unix` lines it up with
        clients on the same host. `counts` are the core's queue sizes after the step."""
        line = {"step": step, "start_s": round(start_s, 6), "duration_s": round(duration_s, 7),
                "start_unix": round(time.time() - duration_s, 6), **features.as_dict(), **counts,
                "device": self._device, **self._meta}
        with self._lock:
            if self._file is not None:
                self._file.write(json.dumps(line) + "\n")

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
