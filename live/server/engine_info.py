"""What the server tells a client about the engine behind it: the model, the
hardware, the core's settings as it runs them (its pool sized, its context known)
and every serve setting, so that a simulator elsewhere can mirror it and a profile
can be named after it."""
from __future__ import annotations

import dataclasses
import functools
import os
import platform
import re
import time

import torch

from scheduler.settings import ServeSettings

from ..engine.engine import Engine
from ..streams.request_log import RequestLog


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
    return {
        "model": model_name,
        "hardware": hardware_name(settings.device),
        "torch_threads": torch.get_num_threads(),
        "scheduler": dataclasses.asdict(engine.core.config),
        "settings": settings.as_dict(),
        "steps": {"ring": engine.step_log.ring_size, "last": engine.step_log.last_step},
        "requests": {"ring": requests.ring_size, "last": requests.last},
        "time_unix": time.time(),
    }
