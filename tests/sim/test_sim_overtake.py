"""`--max-overtakes` through `python -m sim replay`: a small request that fits goes
ahead of a big one that does not, within the bound; 0 keeps arrival order."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from traces.outcome import read_outcomes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def trace(tmp_path):
    # 10 blocks of 4 tokens: a holds 4, b needs 8 and waits for a, c and d need 1 each
    lines = [
        {"id": "a", "arrival_s": 0.0, "prompt_tokens": 8, "max_new_tokens": 8},
        {"id": "b", "arrival_s": 0.0, "prompt_tokens": 16, "max_new_tokens": 16},
        {"id": "c", "arrival_s": 0.5, "prompt_tokens": 1, "max_new_tokens": 3},
        {"id": "d", "arrival_s": 0.5, "prompt_tokens": 1, "max_new_tokens": 3},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def replay(trace, out, bound):
    result = subprocess.run(
        [sys.executable, "-m", "sim", "replay", "--trace", str(trace), "--constant-cost", "1",
         "--num-blocks", "10", "--block-size", "4", "--max-batch", "8",
         "--max-overtakes", str(bound), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return {o.id: o for o in read_outcomes(out / "outcomes.parquet")}


@pytest.mark.parametrize("bound, admitted", [
    (0, {"a": 0.0, "b": 8.0, "c": 8.0, "d": 8.0}),  # c and d wait behind b for a's end
    (1, {"a": 0.0, "b": 8.0, "c": 1.0, "d": 8.0}),  # c goes ahead once, then d waits
    (4, {"a": 0.0, "b": 8.0, "c": 1.0, "d": 1.0}),
])
def test_small_requests_go_ahead_of_a_big_one_within_the_bound(trace, tmp_path, bound, admitted):
    outcomes = replay(trace, tmp_path / "out", bound)
    assert {i: o.admitted_s for i, o in outcomes.items()} == admitted
    assert all(o.finish_reason == "length" for o in outcomes.values())
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["completed"] == 4
