"""The calibration record: one entry per engine step with the plan's features and
how long the step took. The last steps are always kept in a bounded ring that
`GET /v1/steps` serves; with a path they are also written there as JSON lines, and
`[json.loads(l) for l in open(path)]` is all it takes to read them.

The log is for calibration; the streams matter more. A write that fails (a full
disk) is logged once and counted, and the steps go on."""
from __future__ import annotations

import dataclasses
import json
import logging
import operator
import threading
import time
from typing import IO

from scheduler import PlanFeatures
from scheduler.settings import ServeSettings

from .record_ring import RecordRing

log = logging.getLogger("twinstep.step_log")

FEATURE_NAMES = tuple(f.name for f in dataclasses.fields(PlanFeatures))
_feature_values = operator.attrgetter(*FEATURE_NAMES)


class StepLog:
    def __init__(self, path: str | None = None, device: str = "cpu", meta: dict | None = None,
                 ring_size: int = ServeSettings.step_ring):
        self.path = path
        self._device = device
        self._meta = meta or {}
        self._lock = threading.Lock()  # for the file
        # The hot path keeps a tuple of the step's numbers; the record's dict is
        # built only for a file line or a reader.
        self._ring = RecordRing(ring_size, "steps")
        self._file: IO[str] | None = open(path, "w", buffering=1 << 16) if path else None
        self.write_errors = 0
        """Writes to the file that failed (their records are kept in the ring only)."""

    @property
    def ring_size(self) -> int:
        return self._ring.size

    @property
    def last_step(self) -> int:
        """The newest step recorded; 0 before the first (steps count from 1)."""
        return self._ring.last

    def record(self, step: int, start_s: float, duration_s: float, features: PlanFeatures, *,
               tokens: int, admitted: int, waiting: int, paused: int, blocks_reserved: int,
               chunked: bool = False, device_s: float | None = None,
               cpu_s: float | None = None) -> None:
        """`start_s` is on the engine's own clock; the record's `start_unix` lines it
        up with clients. `tokens`: those the step made (a chunk that does not end its
        prompt makes none). The counts are the core's queue sizes after the step.
        `chunked`: a chunk of the step continued a prompt or left it unfinished.
        `device_s`: the step's time on the GPU, where the runner measures it.
        `cpu_s`: the CPU time of the stepping thread over the step; what `duration_s`
        has beyond it, that thread waited: for the interpreter lock (an engine in a
        thread of the server shares it with HTTP), for a core, or for torch's other
        threads (with one torch thread, none)."""
        entry = (step, start_s, duration_s, time.time() - duration_s, _feature_values(features),
                 tokens, admitted, waiting, paused, blocks_reserved, chunked, device_s, cpu_s)
        self._ring.append(entry)
        with self._lock:
            if self._file is not None:
                self._write(self._file.write, json.dumps(self._as_record(entry)) + "\n")

    def after(self, step: int, limit: int | None = None) -> list[dict]:
        """The records of the steps after `step`, oldest first, at most `limit`;
        raises `RecordsLost` if some of them are no longer kept."""
        return [self._as_record(e) for e in self._ring.after(step, limit)]

    def _as_record(self, entry: tuple) -> dict:
        (step, start_s, duration_s, start_unix, features, tokens, admitted, waiting, paused,
         reserved, chunked, device_s, cpu_s) = entry
        record = {"step": step, "start_s": round(start_s, 6), "duration_s": round(duration_s, 7),
                  "start_unix": round(start_unix, 6), **dict(zip(FEATURE_NAMES, features)),
                  "tokens": tokens, "admitted": admitted, "waiting": waiting, "paused": paused,
                  "blocks_reserved": reserved, "chunked": chunked, "device": self._device,
                  **self._meta}
        if device_s is not None:
            record["device_s"] = round(device_s, 7)
        if cpu_s is not None:
            record["cpu_s"] = round(cpu_s, 7)
        return record

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._write(self._file.flush)

    def close(self) -> None:
        """Close the file; the ring stays readable."""
        with self._lock:
            if self._file is not None:
                self._write(self._file.close)
                self._file = None

    def _write(self, action, *args) -> None:
        """`action(*args)` on the file, a failure counted (and logged the first
        time), not raised."""
        try:
            action(*args)
        except (OSError, ValueError):
            self.write_errors += 1
            if self.write_errors == 1:
                log.exception("writing the step log %s failed; the steps go on, and "
                              "GET /v1/steps still has them", self.path)
