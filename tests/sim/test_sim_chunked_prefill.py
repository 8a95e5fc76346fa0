"""Chunked prefill as a what-if on the virtual clock: a long prompt no longer
stalls the streams already decoding, at the price of its own first token."""
import subprocess
import sys

import pytest

from sim import LinearCost, build_setup, replay
from sim.sweep import parse_param
from traces import TraceRequest
from traces.outcome import read_outcomes

# a step costs 10 ms, 1 ms per prompt token and 1 ms per decoding sequence
COST = LinearCost(fixed=0.01, prefill_tokens=0.001, decode_batch=0.001)


def trace():
    # a streams 40 tokens; b's 400-token prompt arrives while a decodes
    return [TraceRequest("a", 0.0, 10, 40), TraceRequest("b", 0.1, 400, 5)]


def run(**settings):
    setup = build_setup(COST, num_blocks=256, block_size=16, max_batch=4, request_s=0.0,
                        delivery_s=0.0, **settings)
    return {o.id: o for o in replay(trace(), setup).outcomes}


def gaps(times):
    return [b - a for a, b in zip(times, times[1:])]


def test_a_long_prompt_in_chunks_stalls_the_running_stream_less_and_waits_longer_itself():
    whole = run(max_prefill_tokens=100)
    chunked = run(max_prefill_tokens=100, chunked_prefill=True)
    # whole: one step of 400 prompt tokens beside a's decode, 0.01 + 0.4 + 0.001
    assert max(gaps(whole["a"].token_times_s)) == approx(0.411)
    # chunked: four steps of 100, each 0.01 + 0.1 + 0.001
    assert max(gaps(chunked["a"].token_times_s)) == approx(0.111)
    b_whole, b_chunked = whole["b"], chunked["b"]
    assert b_chunked.admitted_s == b_whole.admitted_s  # admitted at its first chunk
    # its first token comes with the fourth chunk: three more fixed costs than whole
    assert b_chunked.first_token_engine_s - b_chunked.admitted_s == approx(4 * 0.111)
    assert b_whole.first_token_engine_s - b_whole.admitted_s == approx(0.411)
    for outcomes in (whole, chunked):
        assert [len(o.token_times_s) for o in outcomes.values()] == [40, 5]
        assert all(o.finish_reason == "length" for o in outcomes.values())


def approx(x):
    return pytest.approx(x, abs=1e-9)


def test_a_sweep_turns_it_on_and_off_and_the_command_line_wants_a_budget(tmp_path):
    assert parse_param("chunked_prefill=false,True") == ("chunked_prefill", [False, True])
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "arrival_s": 0, "prompt_tokens": 9, "max_new_tokens": 2}\n')
    out = subprocess.run([sys.executable, "-m", "sim", "replay", str(trace), "--constant-cost", "1",
                          "--chunked-prefill"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "chunked prefill needs max_prefill_tokens" in out.stderr
    out = subprocess.run([sys.executable, "-m", "sim", "replay", str(trace), "--constant-cost", "1",
                          "--chunked-prefill", "--max-prefill-tokens", "4", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    [outcome] = read_outcomes(tmp_path / "o" / "outcomes.parquet")
    # three steps of prompt chunks (4, 4, 1), the last with the first token, then one decode
    assert (outcome.first_token_engine_s, outcome.finish_s) == (3.0, 4.0)
