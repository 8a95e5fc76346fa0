"""The admission policy as a what-if on the virtual clock: the same trace with the
whole length reserved and with optimistic admission, checked step by step."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim import ConstantCost, build_setup, replay
from traces import TraceRequest

ROOT = Path(__file__).resolve().parents[2]


def two_requests():
    # 4 + 8 tokens in blocks of 4: three blocks each at the end, two at the start
    return [TraceRequest("a", 0.0, 4, 8), TraceRequest("b", 0.0, 4, 8)]


def run(admission):
    setup = build_setup(ConstantCost(1.0), admission=admission, num_blocks=4, block_size=4,
                        max_batch=2)
    return replay(two_requests(), setup)


def test_reserving_the_whole_length_runs_one_at_a_time():
    result = run("reserve")
    a, b = result.outcomes
    assert a.token_times_s == [float(t) for t in range(1, 9)]
    assert (b.admitted_s, b.token_times_s) == (8.0, [float(t) for t in range(9, 17)])
    s = result.summary
    assert (s.makespan_s, s.preemptions, s.recomputed_tokens, s.peak_blocks_reserved) == (16.0, 0, 0, 3)


def test_optimistic_admission_runs_both_and_recomputes_the_one_it_preempts():
    result = run("optimistic")
    a, b = result.outcomes
    # Both prefill at once and decode together until their 9th token needs a third
    # block each (step 6): b, the newer, is preempted and waits until a finishes at
    # 8 s; its prompt and its five tokens are then prefilled again (8 to 9 s).
    assert a.token_times_s == [float(t) for t in range(1, 9)]
    assert b.token_times_s == [1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 10.0, 11.0]
    assert (b.admitted_s, b.first_token_engine_s) == (0.0, 1.0)  # its first admission
    assert (b.finish_reason, b.tokens_generated) == ("length", 8)
    s = result.summary
    assert (s.makespan_s, s.preemptions, s.recomputed_tokens, s.peak_blocks_reserved) == (11.0, 1, 9, 4)
    assert s.tokens_generated == 16  # recomputation makes no token twice


def test_the_command_line_takes_the_policy_and_a_sweep_varies_it(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"id": r.id, "arrival_s": r.arrival_s,
                                         "prompt_tokens": r.prompt_tokens,
                                         "max_new_tokens": r.max_new_tokens}) + "\n"
                             for r in two_requests()))
    common = ["--trace", trace, "--constant-cost", 1.0, "--num-blocks", 4, "--block-size", 4,
              "--max-batch", 2]
    out = subprocess.run([sys.executable, "-m", "sim", "replay", *map(str, common),
                          "--admission", "optimistic", "--out", str(tmp_path / "o")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (summary["preemptions"], summary["recomputed_tokens"], summary["makespan_s"]) == (1, 9, 11.0)

    out = subprocess.run([sys.executable, "-m", "sim", "sweep", *map(str, common),
                          "--param", "admission=reserve,optimistic", "--out", str(tmp_path / "s")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "s" / "sweep.json").read_text())["rows"]
    assert [(r["admission"], r["makespan_s"], r["preemptions"]) for r in rows] == [
        ("reserve", 16.0, 0), ("optimistic", 11.0, 1)]


@pytest.mark.parametrize("bad", ["lazy"])
def test_an_unknown_policy_is_one_line_of_error(bad, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps({"id": "a", "arrival_s": 0, "prompt_tokens": 4,
                                 "max_new_tokens": 2}) + "\n")
    out = subprocess.run([sys.executable, "-m", "sim", "sweep", str(trace), "--constant-cost", "1",
                          "--param", f"admission={bad}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "unknown admission policy 'lazy'" in out.stderr
