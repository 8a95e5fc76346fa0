"""What-if: prompts prefilled whole or in chunks, on the Mooncake conversation
trace (prompts of 12,000 tokens on average, up to 126,000) at a quarter of its
rate, on the illustrative GPU-like profile of bench_sim.py. Every setting replays
the same trace on the same pool, side by side in one run.

    .venv/bin/python benchmarks/bench_prefill_chunks.py [--mooncake PATH] [--time-scale 4]
        [--budgets whole,8192,2048,512]

Rows: prefill whole with no budget, whole within a budget (the first prompt of a
step still runs whole), and in chunks of the budget. Figures: TTFT p50 and p99,
inter-token gap p50 and p99 (all streams pooled), each stream's longest gap
(p50 and p99 over streams), end-to-end p50, throughput, peak running.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_sim import GPU_COST, GPU_ENGINE  # noqa: E402
from sim import ReplaySetup, replay  # noqa: E402
from traces import load_trace  # noqa: E402

MOONCAKE = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mooncake", type=Path, default=MOONCAKE)
    p.add_argument("--time-scale", type=float, default=4.0,
                   help="arrival times multiplied by this (4: a quarter of the rate)")
    p.add_argument("--budgets", default="8192,2048,512",
                   help="prefill budgets (prompt tokens a step), comma-separated")
    args = p.parse_args()
    trace = load_trace(args.mooncake, time_scale=args.time_scale)
    print(f"{args.mooncake.name} at time scale {args.time_scale}: {len(trace)} requests, "
          f"{sum(r.prompt_tokens for r in trace)} prompt tokens; "
          f"step costs {dataclasses.asdict(GPU_COST)}")
    print("\n| prefill | budget | TTFT p50 s | TTFT p99 s | gap p50 s | gap p99 s "
          "| longest gap p50 s | longest gap p99 s | e2e p50 s | tokens/s | peak running | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    row(trace, None, chunked=False)
    for budget in map(int, args.budgets.split(",")):
        row(trace, budget, chunked=False)
        row(trace, budget, chunked=True)
    return 0


def row(trace, budget: int | None, chunked: bool) -> None:
    config = dataclasses.replace(GPU_ENGINE, max_prefill_tokens=budget, chunked_prefill=chunked)
    start = time.perf_counter()
    s = replay(trace, ReplaySetup(config, GPU_COST)).summary
    wall = time.perf_counter() - start
    print(f"| {'chunks' if chunked else 'whole'} | {budget or '-'} | {s.ttft_client_p50_s:.2f} "
          f"| {s.ttft_client_p99_s:.2f} | {s.gap_p50_s:.4f} | {s.gap_p99_s:.3f} "
          f"| {s.stall_p50_s:.3f} | {s.stall_p99_s:.2f} | {s.e2e_p50_s:.2f} "
          f"| {s.throughput_tok_s:.0f} | {s.peak_running} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
