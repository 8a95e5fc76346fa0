"""What the server tells a client about the engine behind it: the model, the
hardware, the core's settings as it runs them (its pool sized, its context known)
and every serve setting, so that a simulator elsewhere can mirror it and a profile
can be named after it."""
from __future__ import annotations

import dataclasses
import time

from scheduler.settings import ServeSettings

from ..engine.handle import EngineFacts
from ..streams.request_log import RequestLog


def describe(facts: EngineFacts, last_step: int, requests: RequestLog, model_name: str,
             settings: ServeSettings) -> dict:
    return {
        "model": model_name,
        "hardware": facts.hardware,
        "torch_threads": facts.torch_threads,
        "scheduler": dataclasses.asdict(facts.config),
        "settings": settings.as_dict(),
        "steps": {"ring": facts.step_ring, "last": last_step},
        "requests": {"ring": requests.ring_size, "last": requests.last},
        "time_unix": time.time(),
    }
