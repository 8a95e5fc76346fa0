"""The settings `python -m analysis` starts a server with: the same values go to
`python -m live serve`, and the server then tells the simulator what it runs."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from live.runner.models import EMBEDDED_NAME
from scheduler import ADMISSION_POLICIES


def spare_one_core() -> int:
    """Torch threads for the server's steps: every core but one, which the HTTP side
    and the load generator need; else they steal time from steps at random and the
    step costs a calibration measures do not hold."""
    return max(1, (os.cpu_count() or 2) - 1)


class BadServeOptions(ValueError):
    """Serve settings that cannot go together."""


@dataclass(frozen=True)
class ServeOptions:
    model: str | None = None
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = field(default_factory=spare_one_core)
    max_batch: int = 16
    num_blocks: int | None = 1024
    """None: the server sizes its pool (from `gpu_memory_fraction` on CUDA)."""
    gpu_memory_fraction: float | None = None
    eager: bool = False
    """On CUDA: decode eagerly rather than from CUDA graphs."""
    block_size: int = 16
    max_waiting: int = 256
    max_prefill_tokens: int | None = None
    chunked_prefill: bool = False
    admission: str = "reserve"
    policy: str = "pause_then_drop"
    max_queued: int = 64
    stall_timeout_s: float = 30.0

    def __post_init__(self):
        if self.chunked_prefill and self.max_prefill_tokens is None:
            raise BadServeOptions("--chunked-prefill cuts prompts into chunks of "
                                  "--max-prefill-tokens; give that too")
        if self.admission not in ADMISSION_POLICIES:
            raise BadServeOptions(f"--admission {self.admission}: known policies are "
                                  f"{', '.join(sorted(ADMISSION_POLICIES))}")
        if self.gpu_memory_fraction is None:
            return
        if self.device != "cuda":
            raise BadServeOptions("--gpu-memory-fraction sizes the KV pool of a CUDA device; "
                                  f"the device is {self.device}")
        if self.num_blocks is not None:
            raise BadServeOptions("give the KV pool as --num-blocks or --gpu-memory-fraction, not both")

    def serve_args(self) -> list[str]:
        args = ["--device", self.device, "--dtype", self.dtype, "--max-batch", str(self.max_batch),
                "--block-size", str(self.block_size),
                "--max-waiting", str(self.max_waiting), "--policy", self.policy,
                "--max-queued", str(self.max_queued), "--stall-timeout-s", str(self.stall_timeout_s)]
        args += ["--num-blocks", str(self.num_blocks)] if self.num_blocks is not None else []
        if self.max_prefill_tokens is not None:
            args += ["--max-prefill-tokens", str(self.max_prefill_tokens)]
        args += ["--chunked-prefill"] if self.chunked_prefill else []
        args += ["--admission", self.admission]
        if self.gpu_memory_fraction is not None:
            args += ["--gpu-memory-fraction", str(self.gpu_memory_fraction)]
        args += ["--eager"] if self.eager else []
        args += ["--threads", str(self.threads)] if self.threads else []
        return args + (["--model", self.model] if self.model else [])

    @property
    def model_name(self) -> str:
        """The name the server gives the model (a .gguf file's stem, a directory's name)."""
        if self.model is None:
            return EMBEDDED_NAME
        path = Path(self.model)
        return path.stem if self.model.endswith(".gguf") else path.name
