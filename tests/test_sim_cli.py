"""The command line, run as a user would: `python -m sim ...` in a subprocess."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from traces.outcome import read_outcomes

ROOT = Path(__file__).resolve().parents[1]


def run_sim(*args):
    return subprocess.run([sys.executable, "-m", "sim", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def trace(tmp_path):
    lines = [
        {"id": "a", "arrival_s": 0.0, "prompt_tokens": 10, "max_new_tokens": 3},
        {"id": "b", "arrival_s": 0.0, "prompt_tokens": 10, "max_new_tokens": 3,
         "client": {"read": "per_event", "pause_s": 2.0}},
        {"id": "c", "arrival_s": 0.5, "prompt_tokens": 10, "max_new_tokens": 8,
         "client": {"leave_after_tokens": 2, "leave_how": "rst"}},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_replay_prints_the_summary_and_writes_outcomes(trace, tmp_path):
    out = tmp_path / "out"
    result = run_sim("replay", "--trace", trace, "--constant-cost", 1.0, "--max-batch", 1,
                     "--num-blocks", 64, "--out", out)
    assert result.returncode == 0, result.stderr
    assert "ttft_client_p50_s" in result.stdout
    a, b, c = read_outcomes(out / "outcomes.jsonl")
    # One slot: a runs 0-3, b 3-6 (read at 4, 6, 8; final event at 10), c 6-8 and leaves.
    assert (a.token_times_s, a.finish_s) == ([1.0, 2.0, 3.0], 3.0)
    assert (b.first_token_engine_s, b.token_times_s, b.finish_s) == (4.0, [4.0, 6.0, 8.0], 10.0)
    assert (c.admitted_s, c.left_s, c.tokens_read, c.finish_reason) == (6.0, 8.0, 2, "cancelled")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["makespan_s"] == 10.0 and summary["left"] == 1
    rows = [json.loads(line) for line in (out / "timeseries.jsonl").read_text().splitlines()]
    assert rows[0] == {"time_s": 1.0, "running": 1, "waiting": 1, "paused": 0,
                       "blocks_reserved": 1, "tokens": 1}


def test_sweep_prints_one_row_per_setting(trace):
    result = run_sim("sweep", "--trace", trace, "--constant-cost", 1.0, "--num-blocks", 64,
                     "--param", "max_batch=1,4", "--param", "policy=unbounded,naive")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split()[:3] == ["max_batch", "policy", "completed"]
    assert [row.split()[:2] for row in rows] == [["1", "unbounded"], ["1", "naive"],
                                                 ["4", "unbounded"], ["4", "naive"]]


def test_fit_writes_a_profile_replay_can_use(trace, tmp_path):
    log = tmp_path / "steps.jsonl"
    log.write_text("".join(
        json.dumps({"step": i, "start_s": i * 0.1, "duration_s": 0.002 + 0.001 * (i % 7) + 1e-5 * (i % 5),
                    "num_prefills": 0, "prefill_tokens": 0, "prefill_tokens_sq": 0,
                    "decode_batch": i % 7, "context_tokens": 50 * (i % 5), "device": "cpu"}) + "\n"
        for i in range(1, 101)))
    profile = tmp_path / "p.json"
    result = run_sim("fit", log, "-o", profile, "--hardware", "test-cpu", "--model", "tiny",
                     "--dtype", "fp32", "--max-batch", 4)
    assert result.returncode == 0, result.stderr
    data = json.loads(profile.read_text())
    assert data["coefficients"]["decode_batch"] == pytest.approx(0.001, rel=1e-6)
    assert (data["hardware"], data["device"], data["max_batch"]) == ("test-cpu", "cpu", 4)
    result = run_sim("replay", "--trace", trace, "--profile", profile)
    assert result.returncode == 0, result.stderr


def test_errors_are_one_line_without_a_traceback(trace):
    result = run_sim("replay", "--trace", trace, "--profile", "no-such-profile")
    assert result.returncode == 2
    assert "no profile 'no-such-profile'" in result.stderr and "Traceback" not in result.stderr
    result = run_sim("sweep", "--trace", trace, "--constant-cost", 1, "--param", "max_bacth=1,2")
    assert result.returncode == 2 and "unknown settings ['max_bacth']" in result.stderr
