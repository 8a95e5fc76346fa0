"""A short name for the machine a profile was measured on."""
from __future__ import annotations

import os
import platform
import re


def hardware_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

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


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
