"""What-if: strict arrival order against letting a request that fits go ahead of
one that does not (`max_overtakes`, the bound on how often a waiting request may be
overtaken), on the Azure 2023 conversation hour and the illustrative GPU-like
profile of bench_sim.py, with whole-length reservation on pools tight enough that
the head of the queue often does not fit. Every bound replays the same trace on the
same pool, side by side in one run.

    .venv/bin/python benchmarks/bench_overtake.py [--azure PATH] [--time-scale 1]
        [--blocks 3000,2000] [--max-tokens-factor 4] [--bounds 0,4,16,64]

Figures per pool and bound: TTFT p50 and p99, throughput, the longest wait of any
request from arrival to admission, the longest wait of the largest 1% (by prompt
and max_new_tokens, the requests overtaking passes over), and how many admissions
went ahead of an earlier request.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_sim import AZURE_CONV, GPU_COST, GPU_ENGINE  # noqa: E402
from sim import ReplaySetup, replay  # noqa: E402
from traces import load_trace  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--azure", type=Path, default=AZURE_CONV)
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="arrival times multiplied by this (0.5: twice the rate)")
    p.add_argument("--blocks", default="3000,2000",
                   help="KV pool sizes (blocks of 16 tokens), comma-separated")
    p.add_argument("--max-tokens-factor", type=float, default=4.0,
                   help="how many times the tokens they get clients ask for")
    p.add_argument("--bounds", default="0,4,16,64",
                   help="max_overtakes values, comma-separated (0: strict arrival order)")
    args = p.parse_args()
    trace = load_trace(args.azure, time_scale=args.time_scale)
    print(f"{args.azure.name} at time scale {args.time_scale}: {len(trace)} requests; clients "
          f"ask {args.max_tokens_factor:g}x the tokens they get; reservation of the whole "
          f"length; step costs {dataclasses.asdict(GPU_COST)}")
    print("\n| blocks | max_overtakes | TTFT p50 s | TTFT p99 s | tokens/s | longest wait s "
          "| largest 1%: longest wait s | overtakes | wall s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for blocks in map(int, args.blocks.split(",")):
        for bound in map(int, args.bounds.split(",")):
            row(trace, args.max_tokens_factor, blocks, bound)
    return 0


def row(trace, factor: float, blocks: int, bound: int) -> None:
    config = dataclasses.replace(GPU_ENGINE, num_blocks=blocks, admission="reserve",
                                 max_overtakes=bound)
    cores = []

    def keep_core(env, core):
        cores.append(core)
        yield env.timeout(0)

    start = time.perf_counter()
    result = replay(trace, ReplaySetup(config, GPU_COST, max_tokens_factor=factor), probe=keep_core)
    wall = time.perf_counter() - start
    s = result.summary
    waits = {o.id: o.admitted_s - o.arrival_s for o in result.outcomes if o.admitted_s is not None}
    sizes = {o.id: o.prompt_tokens + o.max_new_tokens for o in result.outcomes}
    largest = sorted(waits, key=sizes.__getitem__)[-max(1, len(waits) // 100):]
    print(f"| {blocks} | {bound} | {s.ttft_client_p50_s:.3f} | {s.ttft_client_p99_s:.2f} "
          f"| {s.throughput_tok_s:.0f} | {max(waits.values()):.2f} "
          f"| {np.max([waits[i] for i in largest]):.2f} | {cores[0].snapshot().overtakes} "
          f"| {wall:.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
