"""Clients that ask for more tokens than the model makes: reservation holds what
they ask, the model stops (eos) where the trace's output ends; the what-if that
tells reservation from optimistic admission."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim import ConstantCost, build_setup, replay
from traces import TraceRequest

ROOT = Path(__file__).resolve().parents[2]


def trace():
    return [TraceRequest("a", 0.0, 4, 4), TraceRequest("b", 0.0, 4, 4)]


def run(admission, factor, **settings):
    return replay(trace(), build_setup(ConstantCost(1.0), admission=admission, num_blocks=6,
                                       block_size=4, max_batch=2, max_tokens_factor=factor,
                                       **settings))


def test_asking_for_what_it_gets_reserves_just_that():
    # 4 + 4 tokens: 2 blocks each, both at once
    a, b = run("reserve", 1.0).outcomes
    assert a.token_times_s == b.token_times_s == [1.0, 2.0, 3.0, 4.0]
    assert (a.finish_reason, b.finish_reason) == ("length", "length")


def test_reservation_holds_what_is_asked_and_the_model_stops_at_its_eos():
    # Asking 4 x 4 = 16 tokens: 4 + 16 in blocks of 4 is 5 blocks of the 6, so b
    # waits for a, which still stops after its 4 tokens.
    a, b = run("reserve", 4.0).outcomes
    assert (a.finish_reason, a.tokens_generated, a.token_times_s) == ("eos", 4, [1.0, 2.0, 3.0, 4.0])
    assert (b.admitted_s, b.token_times_s, b.finish_reason) == (4.0, [5.0, 6.0, 7.0, 8.0], "eos")


def test_optimistic_admission_holds_only_what_is_written():
    result = run("optimistic", 4.0)
    a, b = result.outcomes
    assert a.token_times_s == b.token_times_s == [1.0, 2.0, 3.0, 4.0]
    assert (a.finish_reason, b.finish_reason, result.summary.preemptions) == ("eos", "eos", 0)


def test_the_ask_stays_within_the_model_context():
    # 4 + 16 is over a context of 12: each asks for 8, 3 blocks, and both fit at once
    a, b = run("reserve", 4.0, max_model_len=12).outcomes
    assert a.admitted_s == b.admitted_s == 0.0
    assert (a.finish_reason, b.finish_reason, b.token_times_s) == ("eos", "eos", [1.0, 2.0, 3.0, 4.0])


def test_a_factor_below_one_is_refused_and_a_sweep_varies_it(tmp_path):
    with pytest.raises(ValueError, match="max_tokens_factor must be >= 1"):
        build_setup(ConstantCost(1.0), num_blocks=6, max_tokens_factor=0.5)
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"id": r.id, "arrival_s": 0, "prompt_tokens": 4,
                                        "max_new_tokens": 4}) + "\n" for r in trace()))
    out = subprocess.run([sys.executable, "-m", "sim", "sweep", str(path), "--constant-cost", "1",
                          "--num-blocks", "6", "--block-size", "4", "--max-batch", "2",
                          "--param", "max_tokens_factor=1,4", "--param", "admission=reserve,optimistic",
                          "--out", str(tmp_path / "s")], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "s" / "sweep.json").read_text())["rows"]
    assert [(r["max_tokens_factor"], r["admission"], r["makespan_s"]) for r in rows] == [
        (1, "reserve", 4.0), (1, "optimistic", 4.0), (4, "reserve", 8.0), (4, "optimistic", 4.0)]
