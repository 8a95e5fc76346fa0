"""What the server tells a client about the engine behind it: the model, where and
how it runs, and every setting that decides admission, batching and streams, so
that a simulator elsewhere can mirror it and a profile can be named after it."""
from __future__ import annotations

import dataclasses
import functools
import os
import platform
import re
import time

import torch

from ..engine.engine import Engine
from ..streams.request_log import RequestLog
from ..serve_config import ServeSettings


@functools.cache
def hardware_name(device: str) -> str:
    """A short name for the machine: the GPU's, or the CPU model and its core count."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device)).replace("NVIDIA ", "")
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            found = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        if found:
            model = found.group(1).strip()
    except OSError:
        pass
    return f"{model} x{os.cpu_count()}"


def describe(engine: Engine, requests: RequestLog, model_name: str, settings: ServeSettings) -> dict:
    policy = settings.backlog_policy()
    parameters = dataclasses.asdict(policy) if dataclasses.is_dataclass(policy) else {}
    return {
        "model": model_name,
        "device": settings.device,
        "dtype": settings.dtype,
        "hardware": hardware_name(settings.device),
        "torch_threads": torch.get_num_threads(),
        "scheduler": dataclasses.asdict(engine.core.config),
        "policy": {"name": policy.name, **parameters},
        "streams": {"max_queued": settings.max_queued, "stall_timeout_s": settings.stall_timeout_s,
                    "resume_grace_s": settings.resume_grace_s,
                    "keepalive_s": settings.keepalive_s,
                    "replay_events": settings.replay_events,
                    "event_padding": settings.event_padding},
        "runner": {"gpu_memory_fraction": (settings.gpu_memory_fraction if settings.num_blocks is None
                                           and settings.device.startswith("cuda") else None),
                   "eager": settings.eager},
        "steps": {"ring": engine.step_log.ring_size, "last": engine.step_log.last_step},
        "requests": {"ring": requests.ring_size, "last": requests.last},
        "time_unix": time.time(),
    }
