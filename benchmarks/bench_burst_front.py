"""How the server's front takes in a burst: requests sent at the same instant, as a
load tool's users all starting at once, with prompts of mixed lengths (given as
token ids, as a trace replay sends them). For each burst, from the server's own
records (`/v1/requests`): whether the requests reached the engine in the order
they were sent, how long the front took over the burst, when the prompts of a
body over 1 KiB reached it against the shorter ones, and the step loop's wake: from
the first arrival to the first step, and how many requests that step admitted. The bursts are shuffled differently each time,
so that order is the sender's and not the prompt's length.

    .venv/bin/python benchmarks/bench_burst_front.py [--bursts 8] [--max-batch 4]
        [--engine thread process] [--prompts closed|short]

The embedded model serves (each request makes four tokens), started as a user
would start it, with the engine in a thread of the server or a process of its own.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.live_target import live_target  # noqa: E402
from live.client.loadgen import replay  # noqa: E402
from live.client.request_body import PromptFiller, request_body  # noqa: E402
from live.server.routes_generate import INLINE_BODY_BYTES  # noqa: E402
from scheduler.settings import ServeSettings  # noqa: E402
from traces import TraceRequest  # noqa: E402

PROMPTS = {
    # the first turns of the sixteen users of the closed-loop trace
    "closed": [40, 176, 168, 179, 130, 81, 203, 125, 150, 60, 90, 140, 100, 70, 110, 120],
    # the calibration's burst: sixteen prompts of 16 tokens
    "short": [16] * 16,
}


def burst(target, sizes: list[int], tag: str, seed: int) -> dict:
    order = list(range(len(sizes)))
    random.Random(seed).shuffle(order)
    trace = [TraceRequest(f"{tag}-{seed}-{i}", 0.0, sizes[i], 4) for i in order]
    sent = {r.id: n for n, r in enumerate(trace)}
    long = {r.id for r in trace
            if len(json.dumps(request_body(r, PromptFiller())).encode()) > INLINE_BODY_BYTES}
    before = target.last_request()
    replay(target.url, trace, request_id_prefix="b-")
    time.sleep(0.3)
    records = target.requests_after(before)
    if len(records) != len(trace):
        raise RuntimeError(f"{len(records)} records for {len(trace)} requests")
    for r in records:
        r["id"] = r["id"].removeprefix("b-")
    arrivals = sorted(records, key=lambda r: r["arrival_unix"])
    first = arrivals[0]["arrival_unix"]
    first_step = min(r["admitted_unix"] for r in records)
    ranks = [sent[r["id"]] for r in arrivals]
    return {
        "inversions": sum(a > b for i, a in enumerate(ranks) for b in ranks[i + 1:]),
        "spread_ms": (arrivals[-1]["arrival_unix"] - first) * 1e3,
        "long_ms": statistics.mean((r["arrival_unix"] - first) * 1e3 for r in records
                                   if r["id"] in long) if long else None,
        "short_ms": statistics.mean((r["arrival_unix"] - first) * 1e3 for r in records
                                    if r["id"] not in long),
        "wake_ms": (first_step - first) * 1e3,
        "first_step": sum(r["admitted_unix"] == first_step for r in records),
    }


def spread(values: list[float], digits: int) -> str:
    """The median, and the least and most in brackets."""
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", type=int, default=8)
    parser.add_argument("--max-batch", type=int, default=4)
    parser.add_argument("--engine", nargs="+", choices=("thread", "process"), default=["thread"])
    parser.add_argument("--prompts", nargs="+", choices=sorted(PROMPTS), default=["closed", "short"])
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {args.bursts} bursts a row, "
          f"max batch {args.max_batch}")
    print("| engine | prompts | out of order (pairs) | burst taken in, ms | long / short "
          "bodies reach it, ms (mean) | wake, ms (median) | first step alone | "
          "first step admits (each burst) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engine:
            settings = ServeSettings(max_batch=args.max_batch, engine_process=engine == "process")
            with live_target(settings, Path(tmp) / f"server-{engine}.log") as target:
                for name in args.prompts:
                    rows = [burst(target, PROMPTS[name], name, seed) for seed in range(args.bursts)]
                    longs = [r["long_ms"] for r in rows if r["long_ms"] is not None]
                    long_vs_short = (f"{statistics.mean(longs):.1f} / "
                                     if longs else "none / ") + \
                        f"{statistics.mean(r['short_ms'] for r in rows):.1f}"
                    print(f"| {engine} | {name} | {sum(r['inversions'] for r in rows)} | "
                          f"{spread([r['spread_ms'] for r in rows], 1)} | {long_vs_short} | "
                          f"{spread([r['wake_ms'] for r in rows], 2)} | "
                          f"{sum(r['first_step'] == 1 for r in rows)} of {len(rows)} | "
                          f"{', '.join(str(r['first_step']) for r in rows)} |", flush=True)

if __name__ == "__main__":
    main()
