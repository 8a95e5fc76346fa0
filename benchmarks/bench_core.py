"""Time of plan() + commit() per step of the pure core, by number of running
sequences: the core must never be what limits a GPU decode step. Then the same
with a queue of requests that do not fit behind them, in strict arrival order and
when later requests may overtake: passing a long queue over must not cost a scan
of it every step.

    .venv/bin/python benchmarks/bench_core.py
"""
from __future__ import annotations

import platform
import time

from scheduler import Request, Scheduler, SchedulerConfig


def per_step_us(running: int, steps: int, block_size: int = 16, waiting: int = 0,
                max_overtakes: int = 0) -> float:
    """With `waiting` requests queued behind the running ones, none of which fits."""
    per_seq = -(-(100 + steps + 10) // block_size)
    core = Scheduler(SchedulerConfig(num_blocks=running * per_seq, block_size=block_size,
                                     max_batch=running + waiting, max_waiting=running + waiting,
                                     max_overtakes=max_overtakes))
    for i in range(running + waiting):
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
    print(f"\n{'running':>8} {'waiting':>8} {'max_overtakes':>13} {'us/step':>9}")
    for waiting in (1, 1000):
        for bound in (0, 4):
            us = per_step_us(32, 6_000, waiting=waiting, max_overtakes=bound)
            print(f"{32:>8} {waiting:>8} {bound:>13} {us:>9.1f}")


if __name__ == "__main__":
    main()
