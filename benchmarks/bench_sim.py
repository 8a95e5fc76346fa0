"""Simulated requests per wall second for 1k and 10k requests of a synthetic trace:
Poisson arrivals, mixed lengths, 10% slow readers, 5% leavers, pause policy.

    .venv/bin/python benchmarks/bench_sim.py
"""
from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler import Pause, SchedulerConfig  # noqa: E402
from sim.cost_model import LinearCost  # noqa: E402
from sim.replay import ReplaySetup, replay  # noqa: E402
from traces.record import Client, LeaveHow, ReadMode, TraceRequest  # noqa: E402

# Illustrative step costs of a small model on one GPU (not a measured profile).
COST = LinearCost(fixed=4e-3, num_prefills=2e-4, prefill_tokens=2e-5, decode_batch=5e-5,
                  context_tokens=2e-8)


def synthetic_trace(n: int, rate_per_s: float, seed: int = 0) -> list[TraceRequest]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_per_s, n))
    prompts = rng.integers(32, 1024, n)
    outputs = rng.integers(16, 384, n)
    kind = rng.random(n)
    trace = []
    for i in range(n):
        if kind[i] < 0.10:
            client = Client(read=ReadMode.PER_EVENT, pause_s=0.05)
        elif kind[i] < 0.15:
            client = Client(leave_after_tokens=int(outputs[i]) // 3, leave_how=LeaveHow.RST)
        else:
            client = Client()
        trace.append(TraceRequest(f"r{i}", float(arrivals[i]), int(prompts[i]), int(outputs[i]),
                                  client=client))
    return trace


def main() -> None:
    setup = ReplaySetup(SchedulerConfig(num_blocks=16384, block_size=16, max_batch=64,
                                        max_waiting=100_000), COST, Pause(max_queued=32))
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.processor() or 'cpu'})")
    print(f"{'requests':>9} {'tokens':>10} {'steps':>8} {'wall_s':>8} {'req/s':>9} {'tok/s':>11}")
    for n in (1_000, 10_000):
        trace = synthetic_trace(n, rate_per_s=20.0)
        result = replay(trace, setup)
        tokens = result.summary.tokens_generated
        print(f"{n:>9} {tokens:>10} {result.steps:>8} {result.wall_s:>8.2f} "
              f"{n / result.wall_s:>9.0f} {tokens / result.wall_s:>11.0f}")


if __name__ == "__main__":
    main()
