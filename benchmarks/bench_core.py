"""Time of plan() + commit() per step of the pure core, by number of running
sequences: the core must never be what limits a GPU decode step.

    .venv/bin/python benchmarks/bench_core.py
"""
from __future__ import annotations

import platform
import time

from scheduler import Request, Scheduler, SchedulerConfig


def per_step_us(running: int, steps: int, block_size: int = 16) -> float:
    per_seq = -(-(100 + steps + 10) // block_size)
    core = Scheduler(SchedulerConfig(num_blocks=running * per_seq, block_size=block_size,
                                     max_batch=running, max_waiting=running))
    for i in range(running):
        core.submit(Request(f"r{i}", 100, steps + 10))
    plan = core.plan()  # every prefill in one step, outside the timing
    core.commit(plan, [1] * len(plan.sequences))
    tokens = [1] * running
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps // 3):
            plan = core.plan()
            core.commit(plan, tokens)
        best = min(best, (time.perf_counter() - t0) / (steps // 3))
    return best * 1e6


def main() -> None:
    print(f"python {platform.python_version()} on {platform.machine()}, {platform.processor() or ''}")
    print(f"\n{'running':>8} {'us/step':>9} {'us/seq':>8}")
    for n, steps in [(1, 30_000), (32, 6_000), (256, 900), (1024, 300)]:
        us = per_step_us(n, steps)
        print(f"{n:>8} {us:>9.1f} {us / n:>8.2f}")


if __name__ == "__main__":
    main()
