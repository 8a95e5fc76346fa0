"""The simulator's speed in two checkouts side by side: the Azure hour (fast
readers, GPU-like profile, `bench_sim.py`'s first workload) replayed in-process
by each tree in turn, each in its own interpreter, alternating `--rounds` times,
so that both see the same moments of a noisy machine.

    .venv/bin/python benchmarks/sim_trees.py OTHER_CHECKOUT [--rounds 3]

Prints one line per replay: the tree, wall and CPU seconds, and the figures that
must agree (requests completed, tokens, steps, makespan)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="another checkout of this project")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--azure", type=Path, default=AZURE_CONV)
    args = parser.parse_args()
    trees = {"other": args.other.resolve(), "this": ROOT}
    for _ in range(args.rounds):
        for name, root in trees.items():
            done = subprocess.run([sys.executable, "-c", REPLAY, str(root), str(args.azure)],
                                  cwd=root, capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout.splitlines()[-1])
            print(json.dumps({"tree": name, **figures}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
