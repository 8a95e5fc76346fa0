"""The simulator at scale: synthetic Azure-like traces (prompt and output lengths
resampled from the Azure 2023 conversation hour, Poisson arrivals at its rate) of
10k, 100k and 1M requests, each replayed by `python -m sim replay --out` in its own
process on the GPU-like profile of `bench_sim.py`, timed, with the process's peak
memory; then the same without token times in the records, and the bare speed of
SimPy on this machine (a million timeouts), to compare machines.

    .venv/bin/python benchmarks/bench_sim_scale.py [--sizes 10000 100000 1000000]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import bench_sim  # noqa: E402
from sim_trees import bare_simpy  # noqa: E402
from traces import Resampled, generate, load_trace, write_trace  # noqa: E402

CHILD_PEAK = """
import runpy, sys
sys.argv = ["sim"] + sys.argv[1:]
try:
    runpy.run_module("sim", run_name="__main__")
except SystemExit as done:
    code = done.code
else:
    code = 0
with open("/proc/self/status") as status:
    peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print("peak_rss_mb", peak_kb / 1024, file=sys.stderr)
sys.exit(code)
"""
"""`python -m sim` that says its own peak memory at the end: the high-water mark of
its own address space. (Its ru_maxrss would not do: Linux counts in it the memory
of the parent it was forked from, here holding the generated trace.)"""


def azure_like(count: int, seed: int = 0):
    hour = load_trace(bench_sim.AZURE_CONV)
    rate = len(hour) / max(r.arrival_s for r in hour)
    return generate(rate=rate, count=count,
                    prompt_lengths=Resampled(tuple(r.prompt_tokens for r in hour)),
                    output_lengths=Resampled(tuple(r.max_new_tokens for r in hour)), seed=seed)


def replay_command(trace_file: Path, profile: Path, out: Path, token_times: bool):
    config = bench_sim.GPU_ENGINE
    command = [sys.executable, "-c", CHILD_PEAK, "replay", "--trace", str(trace_file),
               "--profile", str(profile), "--max-batch", str(config.max_batch),
               "--block-size", str(config.block_size), "--max-waiting", str(config.max_waiting),
               "--policy", "unbounded", "--quiet", "--out", str(out)]
    if not token_times:
        command.append("--no-token-times")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = float(done.stderr.split("peak_rss_mb")[-1])
    steps = int(done.stdout.split(" steps")[0].split()[-1])
    size = (out / "outcomes.parquet").stat().st_size / 2**20
    return wall, peak, steps, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = parser.parse_args()
    print(f"bare SimPy: {bare_simpy():.2f} s for a million timeouts")
    print("| requests | token times | steps | wall s | µs a request | peak MB | records MB |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        profile = bench_sim.profile_file(bench_sim.GPU_COST, bench_sim.GPU_ENGINE,
                                         tmp / "profile.json")
        for count in args.sizes:
            trace_file = tmp / f"azure_like_{count}.jsonl"
            write_trace(trace_file, azure_like(count))
            for token_times in (True, False):
                wall, peak, steps, size = replay_command(trace_file, profile, tmp / "out",
                                                         token_times)
                print(f"| {count:,} | {'yes' if token_times else 'no'} | {steps:,} | "
                      f"{wall:.1f} | {wall / count * 1e6:.0f} | {peak:.0f} | {size:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
