"""What-if: admission by whole-length reservation against optimistic admission with
preemption (vLLM's), on the Azure 2023 conversation hour at twice its rate and the
illustrative GPU-like profile of bench_sim.py, as the KV pool shrinks. Both policies
replay the same trace on the same pool, side by side in one run.

    .venv/bin/python benchmarks/bench_admission.py [--azure PATH] [--time-scale 0.5]
        [--blocks 26000,4000,3000,2000] [--max-tokens-factors 1,4] [--max-overtakes N]

Figures per pool, policy and max-tokens factor (clients asking for that many times
the tokens they get, as the trace's output lengths are what the model made): TTFT
p50 and p99, end-to-end p50, throughput, makespan, the peak of sequences running,
preemptions, the tokens prefilled again for preempted sequences (as a share of all
prefilled tokens), and requests refused (asking for more than the pool holds).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_sim import AZURE_CONV, GPU_COST, GPU_ENGINE  # noqa: E402
from sim import ReplaySetup, replay  # noqa: E402
from traces import load_trace  # noqa: E402

POLICIES = ("reserve", "optimistic")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--azure", type=Path, default=AZURE_CONV)
    p.add_argument("--time-scale", type=float, default=0.5,
                   help="arrival times multiplied by this (0.5: twice the rate)")
    p.add_argument("--blocks", default="26000,4000,3000,2000",
                   help="KV pool sizes (blocks of 16 tokens), comma-separated")
    p.add_argument("--max-tokens-factors", default="1,4",
                   help="how many times the tokens they get clients ask for, comma-separated")
    p.add_argument("--max-overtakes", type=int, default=GPU_ENGINE.max_overtakes,
                   help="how often a waiting request may be passed by ones that fit "
                        "(0: strict arrival order)")
    args = p.parse_args()
    trace = load_trace(args.azure, time_scale=args.time_scale)
    prompt_tokens = sum(r.prompt_tokens for r in trace)
    print(f"{args.azure.name} at time scale {args.time_scale}: {len(trace)} requests, "
          f"{prompt_tokens} prompt tokens; "
          f"max overtakes {args.max_overtakes}; step costs {dataclasses.asdict(GPU_COST)}")
    print("\n| asks | blocks | admission | TTFT p50 s | TTFT p99 s | e2e p50 s | tokens/s "
          "| makespan s | peak running | preemptions | recomputed tokens | refused | wall s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for factor in map(float, args.max_tokens_factors.split(",")):
        for blocks in map(int, args.blocks.split(",")):
            for admission in POLICIES:
                row(trace, prompt_tokens, factor, blocks, admission, args.max_overtakes)
    return 0


def row(trace, prompt_tokens: int, factor: float, blocks: int, admission: str,
        max_overtakes: int) -> None:
    config = dataclasses.replace(GPU_ENGINE, num_blocks=blocks, admission=admission,
                                 max_overtakes=max_overtakes)
    start = time.perf_counter()
    s = replay(trace, ReplaySetup(config, GPU_COST, max_tokens_factor=factor)).summary
    wall = time.perf_counter() - start
    share = s.recomputed_tokens / (prompt_tokens + s.recomputed_tokens)
    print(f"| {factor:g}x | {blocks} | {admission} | {s.ttft_client_p50_s:.3f} "
          f"| {s.ttft_client_p99_s:.2f} "
          f"| {s.e2e_p50_s:.2f} | {s.throughput_tok_s:.0f} | {s.makespan_s:.0f} "
          f"| {s.peak_running} | {s.preemptions} | {s.recomputed_tokens} ({share:.1%}) "
          f"| {s.refused} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
