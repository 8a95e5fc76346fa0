"""Simulator speed on three workloads, each replayed in this process and by the
whole command line (`python -m sim replay ... --out DIR`, so loading the trace and
writing every result file count too):

1. the Azure 2023 conversation trace (one hour, 19,366 requests), every client an
   instant reader that stays, on a GPU-like cost profile that serves the hour;
2. the same hour with 10% slow readers and 20% leavers (`traces.ClientMix`);
3. 10,000 synthetic requests at a rate that keeps about 64 streams running.

    .venv/bin/python benchmarks/bench_sim.py [--azure PATH] [--repeat N]

The Azure trace is read from ../shared/traces/ beside the repository unless --azure
names it. Figures: simulated requests and tokens per wall second, and simulated
time over wall time; wall and CPU seconds are the best of --repeat runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler import Pause, SchedulerConfig  # noqa: E402
from sim import ReplaySetup, replay  # noqa: E402
from sim.cost_model import LinearCost  # noqa: E402
from sim.profile import Profile, save_profile  # noqa: E402
from traces import (ClientMix, LeaveHow, TraceRequest, Uniform, generate, load_trace,  # noqa: E402
                    write_trace)

AZURE_CONV = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"

# GPU-like, illustrative (not measured): one H100/H200-class GPU serving an 8B
# model with grouped-query attention (Llama-3-8B-like) in bf16. A step costs 5 ms
# (reading 16 GB of weights at about 3.3 TB/s), 0.1 ms per prefill, 35 us per prompt
# token (16 GFLOP a token at about 450 TFLOP/s) plus attention's 0.5 ns per squared
# prompt token, 30 us per decoding sequence and 40 ns per context token (128 KiB
# of K and V a token read at 3.3 TB/s).
GPU_COST = LinearCost(fixed=5e-3, num_prefills=1e-4, prefill_tokens=3.5e-5,
                      prefill_tokens_sq=5e-10, decode_batch=3e-5, context_tokens=4e-8)
# 26,000 blocks of 16 tokens: 416k tokens, 52 GiB of KV cache beside the weights.
GPU_ENGINE = SchedulerConfig(num_blocks=26_000, block_size=16, max_batch=256, max_waiting=100_000)

# Illustrative step costs of a smaller model, batch 64 (the earlier benchmark's).
SMALL_COST = LinearCost(fixed=4e-3, num_prefills=2e-4, prefill_tokens=2e-5, decode_batch=5e-5,
                        context_tokens=2e-8)
SMALL_ENGINE = SchedulerConfig(num_blocks=16_384, block_size=16, max_batch=64, max_waiting=100_000)

MIXED_CLIENTS = ClientMix(slow=0.1, slow_pause_s=0.05, leave=0.2, leave_after_tokens=32,
                          leave_how=LeaveHow.RST)
"""Slow readers take 20 tokens a second; leavers reset the connection after 32 tokens."""
BUSY_64_RATE = 28.0
"""Requests per second that keep about 60 of the 64 slots running on SMALL_COST."""


@dataclasses.dataclass
class Workload:
    name: str
    trace: list[TraceRequest]
    setup: ReplaySetup
    cli_options: list[str]
    source: Path | None = None
    """The file the command line reads, if the trace is that file as loaded."""


def with_clients(trace: list[TraceRequest], mix: ClientMix, seed: int = 0) -> list[TraceRequest]:
    clients = mix.assign(len(trace), np.random.default_rng(seed))
    return [dataclasses.replace(r, client=c) for r, c in zip(trace, clients)]


def workloads(azure: Path) -> list[Workload]:
    hour = load_trace(azure)
    gpu = ReplaySetup(GPU_ENGINE, GPU_COST)
    busy = generate(rate=BUSY_64_RATE, count=10_000, prompt_lengths=Uniform(32, 1023),
                    output_lengths=Uniform(16, 383),
                    clients=ClientMix(slow=0.1, slow_pause_s=0.05, leave=0.05,
                                      leave_after_tokens=64, leave_how=LeaveHow.RST))
    pause = ["--max-queued", "32"]
    return [
        Workload("azure hour, fast readers", hour, gpu, [], source=azure),
        Workload("azure hour, 10% slow, 20% leave", with_clients(hour, MIXED_CLIENTS), gpu, []),
        Workload("10k requests, 64 streams", busy,
                 ReplaySetup(SMALL_ENGINE, SMALL_COST, Pause(max_queued=32)), pause),
    ]


def profile_file(cost: LinearCost, config: SchedulerConfig, path: Path) -> Path:
    save_profile(Profile(hardware="gpu-like (illustrative)", model="8B-like", dtype="bf16",
                         coefficients=cost.coefficients(), fit={}, steps=0,
                         date=time.strftime("%Y-%m-%d"), block_size=config.block_size,
                         max_batch=config.max_batch, num_blocks=config.num_blocks), path)
    return path


def time_in_process(work: Workload, repeat: int):
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = replay(work.trace, work.setup)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return result, best_wall, best_cpu


def time_command_line(work: Workload, trace_file: Path, tmp: Path,
                      repeat: int) -> tuple[float, dict]:
    """Wall seconds of the whole command, and the summary it wrote."""
    config = work.setup.config
    profile = profile_file(work.setup.cost, config, tmp / "profile.json")
    out = tmp / "out"
    command = [sys.executable, "-m", "sim", "replay", "--trace", str(trace_file),
               "--profile", str(profile), "--max-batch", str(config.max_batch),
               "--block-size", str(config.block_size), "--max-waiting", str(config.max_waiting),
               "--policy", work.setup.policy.name, *work.cli_options, "--out", str(out)]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best, json.loads((out / "summary.json").read_text())


def measure(work: Workload, repeat: int) -> str:
    result, wall, cpu = time_in_process(work, repeat)
    s = result.summary
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trace_file = work.source
        if trace_file is None:
            trace_file = tmp / "trace.jsonl"
            write_trace(trace_file, work.trace)
        cli_wall, cli_summary = time_command_line(work, trace_file, tmp, repeat)
    if cli_summary != json.loads(json.dumps(s.as_dict())):
        raise SystemExit(f"{work.name}: the command line's replay differs from this process's")
    return (f"{work.name:<33} {s.requests:>8} {s.tokens_generated:>9} {result.steps:>7} "
            f"{s.makespan_s:>7.0f} {wall:>7.2f} {cpu:>6.2f} {s.requests / wall:>7.0f} "
            f"{s.tokens_generated / wall:>9.0f} {s.makespan_s / wall:>8.0f} "
            f"{cli_wall:>6.2f} {s.makespan_s / cli_wall:>12.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--azure", type=Path, default=AZURE_CONV,
                        help="the Azure 2023 conversation trace (AzureLLMInferenceTrace_conv.csv)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, the best is kept")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}")
    print(f"{'workload':<33} {'requests':>8} {'tokens':>9} {'steps':>7} {'sim_s':>7} "
          f"{'wall_s':>7} {'cpu_s':>6} {'req/s':>7} {'tok/s':>9} {'sim/wall':>8} "
          f"{'cli_s':>6} {'cli sim/wall':>12}")
    for work in workloads(args.azure):
        print(measure(work, args.repeat), flush=True)


if __name__ == "__main__":
    main()
