"""The settings `python -m analysis` starts a server with: the same values go to
`python -m live serve`, and the server then tells the simulator what it runs."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from live.models import EMBEDDED_NAME


def spare_one_core() -> int:
    """Torch threads for the server's steps: every core but one, which the HTTP side
    and the load generator need; else they steal time from steps at random and the
    step costs a calibration measures do not hold."""
    return max(1, (os.cpu_count() or 2) - 1)


@dataclass(frozen=True)
class ServeOptions:
    model: str | None = None
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = field(default_factory=spare_one_core)
    max_batch: int = 16
    num_blocks: int = 1024
    block_size: int = 16
    max_waiting: int = 256
    policy: str = "pause_then_drop"
    max_queued: int = 64
    stall_timeout_s: float = 30.0

    def serve_args(self) -> list[str]:
        args = ["--device", self.device, "--dtype", self.dtype, "--max-batch", str(self.max_batch),
                "--num-blocks", str(self.num_blocks), "--block-size", str(self.block_size),
                "--max-waiting", str(self.max_waiting), "--policy", self.policy,
                "--max-queued", str(self.max_queued), "--stall-timeout-s", str(self.stall_timeout_s)]
        args += ["--threads", str(self.threads)] if self.threads else []
        return args + (["--model", self.model] if self.model else [])

    @property
    def model_name(self) -> str:
        """The name the server gives the model (a .gguf file's stem, a directory's name)."""
        if self.model is None:
            return EMBEDDED_NAME
        path = Path(self.model)
        return path.stem if self.model.endswith(".gguf") else path.name
