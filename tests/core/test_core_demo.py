"""`python -m scheduler demo`, as a user runs it: the core by hand under either
admission policy, the pool whole at the end."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("admission, counts, steps", [
    ("reserve", "preemptions 0, tokens recomputed 0", 16),
    ("optimistic", "preemptions 2, tokens recomputed 14", 13),
])
def test_the_demo_runs_to_a_whole_pool(admission, counts, steps):
    out = subprocess.run([sys.executable, "-m", "scheduler", "demo", "--admission", admission,
                          "--max-overtakes", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-2:] == [counts, "pool whole after the run: True"]
    rows = [line for line in lines if line[:4].strip().isdigit()]
    assert len(rows) == steps and rows[-1].endswith("r2:length")
    assert ("r2:preempted" in out.stdout) == (admission == "optimistic")


def test_the_demo_lets_a_small_request_go_ahead_by_default():
    out = subprocess.run([sys.executable, "-m", "scheduler", "demo"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line[:4].strip().isdigit()]
    # r1 (18 tokens: 5 blocks) does not fit beside r0 (3 of the 7); r2 (15 tokens: 4
    # blocks) does, and goes ahead of it
    assert rows[0][1] == "r0,r2"
    assert out.stdout.splitlines()[-1] == "pool whole after the run: True"


def test_the_demo_prefills_in_chunks_when_asked():
    out = subprocess.run([sys.executable, "-m", "scheduler", "demo", "--chunk", "4",
                          "--max-overtakes", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line[:4].strip().isdigit()]
    # r0's 6-token prompt in chunks of 4 and 2, then r3's 5 in 4 and 1
    assert [row[1] for row in rows if "(" in row[1]] == ["r0(4)", "r0(2)", "r3(4)", "r3(1)"]
    assert out.stdout.splitlines()[-1] == "pool whole after the run: True"
