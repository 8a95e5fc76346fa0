"""The engine settings a twin run holds fixed on both sides: the same values go
to `python -m live serve` and to the simulator's scheduler."""
from __future__ import annotations

import os
from dataclasses import dataclass, field


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

    def sim_settings(self) -> dict:
        """Flat settings for `sim.build_setup`."""
        return dict(policy=self.policy, max_batch=self.max_batch, num_blocks=self.num_blocks,
                    block_size=self.block_size, max_waiting=self.max_waiting,
                    max_queued=self.max_queued, stall_timeout_s=self.stall_timeout_s)

    @property
    def dtype_short(self) -> str:
        return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[self.dtype]
