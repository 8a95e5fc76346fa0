"""What watching a replay against its profile's fitted ranges costs: the Azure hour
(`bench_sim.py`'s first workload) replayed with and without `ReplaySetup.fitted`,
alternating, in one process, with ranges it goes past.

    .venv/bin/python benchmarks/bench_range_watch.py [--rounds 3]"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

import bench_sim  # noqa: E402
from sim.fitted_ranges import FittedRanges  # noqa: E402

AZURE_CONV = Path(__file__).resolve().parents[2] / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"
RANGES = FittedRanges(num_prefills=8, prefill_tokens=4096, decode_batch=64, context_tokens=60_000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = bench_sim.workloads(AZURE_CONV)[0]
    setups = {"plain": work.setup, "watched": replace(work.setup, fitted=RANGES)}
    times: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(args.rounds):
        for name, setup in setups.items():
            start = time.perf_counter()
            result = bench_sim.replay(work.trace, setup)
            times[name].append(time.perf_counter() - start)
            print(f"{name:8} {times[name][-1]:6.2f} s  steps {result.steps}  "
                  f"makespan {result.summary.makespan_s:.3f} s", flush=True)
    plain, watched = (statistics.median(times[name]) for name in setups)
    print(f"medians: plain {plain:.2f} s, watched {watched:.2f} s ({watched / plain - 1:+.1%})")
    for beyond in result.beyond_fitted:
        print(f"  {beyond.describe()}")


if __name__ == "__main__":
    main()
