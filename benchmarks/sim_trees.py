"""The simulator's speed in two checkouts side by side: the Azure hour (fast
readers, GPU-like profile, `bench_sim.py`'s first workload) replayed in-process
by each tree in turn, each in its own interpreter, and by each tree's whole
command line writing its records (`python -m sim replay ... --out DIR`),
alternating `--rounds` times, so that both see the same moments of a noisy
machine. The bare speed of SimPy (a million timeouts) is measured once beside.

    .venv/bin/python benchmarks/sim_trees.py OTHER_CHECKOUT [--rounds 3]

Prints one line per replay: the tree, the mode, wall and CPU seconds, and the
figures that must agree (requests completed, tokens, steps, makespan)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AZURE_CONV = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.csv"

REPLAY = r'''
import json, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/benchmarks"]
import bench_sim
work = bench_sim.workloads(Path(sys.argv[2]))[0]
wall, cpu = time.perf_counter(), time.process_time()
result = bench_sim.replay(work.trace, work.setup)
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "completed": result.summary.completed,
                  "tokens": result.summary.tokens_generated, "steps": result.steps,
                  "makespan_s": result.summary.makespan_s}))
'''


def bare_simpy(n: int = 1_000_000) -> float:
    import simpy

    env = simpy.Environment()

    def ticks():
        for _ in range(n):
            yield env.timeout(1e-3)
    env.process(ticks())
    start = time.perf_counter()
    env.run()
    return time.perf_counter() - start


def command(root: Path, azure: Path, profile: Path, out: Path) -> dict:
    """The whole command with its records, as a user runs it in that tree."""
    argv = [sys.executable, "-m", "sim", "replay", "--trace", str(azure), "--profile",
            str(profile), "--max-batch", "256", "--block-size", "16", "--max-waiting", "100000",
            "--policy", "unbounded", "--quiet", "--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "completed": summary["completed"],
            "tokens": summary["tokens_generated"], "makespan_s": summary["makespan_s"],
            "records": sorted(p.name for p in out.iterdir()), "printed": done.stdout.count("\n")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="another checkout of this project")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--azure", type=Path, default=AZURE_CONV)
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    import bench_sim

    print(json.dumps({"bare_simpy_s_per_million_timeouts": round(bare_simpy(), 3)}))
    trees = {"other": args.other.resolve(), "this": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        profile = bench_sim.profile_file(bench_sim.GPU_COST, bench_sim.GPU_ENGINE,
                                         tmp / "profile.json")
        for round_ in range(args.rounds):
            for name, root in trees.items():
                done = subprocess.run([sys.executable, "-c", REPLAY, str(root), str(args.azure)],
                                      cwd=root, capture_output=True, text=True, check=True)
                figures = json.loads(done.stdout.splitlines()[-1])
                print(json.dumps({"tree": name, "mode": "in-process", **figures}), flush=True)
                figures = command(root, args.azure, profile, tmp / f"{name}-{round_}")
                print(json.dumps({"tree": name, "mode": "command --out", **figures}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
