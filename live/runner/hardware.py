"""A short name for the machine a model runs on, as profiles and `/v1/engine` name it."""
from __future__ import annotations

import functools
import os
import platform
import re

import torch


@functools.cache
def hardware_name(device: str) -> str:
    """The GPU's name, or the CPU model and its core count."""
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
