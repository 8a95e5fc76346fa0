"""What-if: per-key limits on the Azure 2023 conversation hour, its requests given
API keys with a few heavy users (`traces.shaping.assign_keys`: 100 keys, Zipf-like
skew 1.2, so the three heaviest send about half the hour). Each cap on the streams
one key may hold replays the same keyed trace, side by side in one run, on three
servers: the shipped CPU profile with the command line's default settings (a
server far too small for the hour, which refuses most of it whatever the cap); the
illustrative GPU-like profile of bench_sim.py, which serves the hour; and the same
at twice the hour's rate, which fills its batch of 256.

    .venv/bin/python benchmarks/whatif_key_limits.py [--azure PATH] [--keys 100]
        [--key-skew 1.2] [--seed 0] [--caps none,8,32]

Figures per server and cap: requests served to their end, refused by reason, TTFT
p50 and p99 (at the client) of the three heaviest keys' served requests beside
every other key's, throughput, and the replay's wall time.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_sim import AZURE_CONV, GPU_COST, GPU_ENGINE  # noqa: E402
from scheduler.settings import ServeSettings  # noqa: E402
from sim import Replay, ReplaySetup, build_setup, load_profile, replay  # noqa: E402
from sim.profile import CPU_SMOLLM2  # noqa: E402
from sim.settings import DEFAULT_POOL, SimSettings, replay_settings  # noqa: E402
from traces import load_trace  # noqa: E402
from traces.shaping import assign_keys, shape  # noqa: E402

HEAVIEST = 3
"""The keys that send the most requests, whose TTFT is shown apart."""


def cpu_setup(cap: int | None) -> ReplaySetup:
    """What `python -m sim replay TRACE --max-streams-per-key CAP` replays on."""
    profile = load_profile(CPU_SMOLLM2)
    flat = replay_settings(ServeSettings(max_streams_per_key=cap), SimSettings(),
                           profile.num_blocks or DEFAULT_POOL, profile.overheads)
    return build_setup(profile.cost_model(), **flat)


def gpu_setup(cap: int | None) -> ReplaySetup:
    return ReplaySetup(dataclasses.replace(GPU_ENGINE, max_streams_per_key=cap), GPU_COST)


SERVERS = [("CPU profile, defaults", cpu_setup, 1.0), ("GPU-like, batch 256", gpu_setup, 1.0),
           ("GPU-like, twice the rate", gpu_setup, 0.5)]
"""Each server, and the time scale of the hour it replays (0.5: twice the rate)."""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--azure", type=Path, default=AZURE_CONV)
    p.add_argument("--keys", type=int, default=100)
    p.add_argument("--key-skew", type=float, default=1.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--caps", default="none,8,32",
                   help="streams one key may hold at once, comma-separated; none: no limit")
    args = p.parse_args()
    hour = assign_keys(load_trace(args.azure), args.keys, args.key_skew, args.seed)
    sent = Counter(r.key for r in hour)
    heavy = {key for key, _ in sent.most_common(HEAVIEST)}
    heavy_share = sum(sent[key] for key in heavy) / len(hour)
    print(f"{args.azure.name}: {len(hour)} requests from {len(sent)} keys (skew "
          f"{args.key_skew}, seed {args.seed}); the {HEAVIEST} heaviest "
          f"({', '.join(sorted(heavy))}) send {heavy_share:.1%}")
    print("\n| server | cap | served | refused | heavy keys refused | heavy TTFT p50 / p99 s "
          "| other keys refused | others TTFT p50 / p99 s | tokens/s | wall s |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    caps = [None if c == "none" else int(c) for c in args.caps.split(",")]
    is_heavy = [r.key in heavy for r in hour]
    for server, setup, time_scale in SERVERS:
        trace = shape(hour, time_scale=time_scale)
        for cap in caps:
            print(row(server, cap, replay(trace, setup(cap)), is_heavy), flush=True)
    return 0


def row(server: str, cap: int | None, result: Replay, is_heavy: list[bool]) -> str:
    s = result.summary
    refused = ", ".join(f"{reason} {n}" for reason, n in result.refusals.items()) or "0"
    return (f"| {server} | {cap or 'none'} | {s.completed} | {refused} "
            f"| {group_cells(result, is_heavy, True)} | {group_cells(result, is_heavy, False)} "
            f"| {s.throughput_tok_s:.0f} | {result.wall_s:.1f} |")


def group_cells(result: Replay, is_heavy: list[bool], heavy: bool) -> str:
    """The heavy keys' requests (or the others'): how many were refused, and the
    TTFT p50 / p99 of those served."""
    group = [o for o, h in zip(result.outcomes, is_heavy) if h == heavy]
    refused = sum(o.refused is not None for o in group)
    ttft = [o.ttft_client_s for o in group if o.ttft_client_s is not None]
    if not ttft:
        return f"{refused} of {len(group)} | -"
    p50, p99 = np.percentile(ttft, (50, 99))
    return f"{refused} of {len(group)} | {p50:.3f} / {p99:.2f}"


if __name__ == "__main__":
    sys.exit(main())
