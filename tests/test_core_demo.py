"""`python -m scheduler demo`, as a user runs it: the core by hand under either
admission policy, the pool whole at the end."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("admission, counts, steps", [
    ("reserve", "preemptions 0, tokens recomputed 0", 16),
    ("optimistic", "preemptions 2, tokens recomputed 14", 13),
])
def test_the_demo_runs_to_a_whole_pool(admission, counts, steps):
    out = subprocess.run([sys.executable, "-m", "scheduler", "demo", "--admission", admission],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-2:] == [counts, "pool whole after the run: True"]
    rows = [line for line in lines if line[:4].strip().isdigit()]
    assert len(rows) == steps and rows[-1].endswith("r2:length")
    assert ("r2:preempted" in out.stdout) == (admission == "optimistic")
