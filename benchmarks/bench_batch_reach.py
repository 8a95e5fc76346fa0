"""How a calibration prices decode batches past the server's own limit: from a step
log whose ladder climbed past it (`analysis.calibrate.BATCH_REACH`), half the
decode-only steps of those larger batches are held out, drawn `--draws` times;
each draw fits the log twice, without any step of more than `--limit` sequences
(the larger batches extrapolated, as a calibration at the server's limit would)
and with the other half (measured), and prices the held-out half both ways.

    .venv/bin/python benchmarks/bench_batch_reach.py runs/cal/calibration-steps.jsonl [--limit 16]"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from sim.fit import fit, load_step_log, step_features, step_kind  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("step_log", type=Path)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--draws", type=int, default=10)
    args = parser.parse_args()
    steps = load_step_log(args.step_log)
    past = [i for i, s in enumerate(steps) if s["decode_batch"] + s["num_prefills"] > args.limit]
    larger = [i for i in past if step_kind(steps[i]) == "decode"]
    if len(larger) < 2:
        sys.exit(f"{args.step_log}: no decode-only steps past {args.limit} sequences to hold out")
    left_out = set(past)
    extrapolated = fit([s for i, s in enumerate(steps) if i not in left_out])[0]
    rng = np.random.default_rng(0)
    figures: dict[str, list[tuple[float, float]]] = {"extrapolated": [], "measured": []}
    for _ in range(args.draws):
        held = set(rng.permutation(larger)[:len(larger) // 2].tolist())
        fits = {"extrapolated": extrapolated,
                "measured": fit([s for i, s in enumerate(steps) if i not in held])[0]}
        for name, cost in fits.items():
            ratios = [steps[i]["duration_s"] / cost.cost(step_features(steps[i])) for i in sorted(held)]
            figures[name].append((statistics.median(ratios),
                                  statistics.mean(abs(1 / r - 1) for r in ratios)))
    print(f"{len(larger)} decode-only steps past {args.limit} sequences of {len(steps)}, "
          f"half held out, {args.draws} draws")
    for name, draws in figures.items():
        ratios, errors = zip(*draws)
        print(f"{name:12} took {statistics.median(ratios):.3f} of their price "
              f"({min(ratios):.3f} to {max(ratios):.3f}), mean error {statistics.median(errors):.1%}")


if __name__ == "__main__":
    main()
