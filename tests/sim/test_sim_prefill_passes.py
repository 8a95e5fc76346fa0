"""Prefill passes on the virtual clock: the prompts admitted in one step make their
first tokens pass by pass, each pass ending at the step's start plus its share of
the step's cost (the cost model's price of that pass alone, scaled so that the
passes add up to the step), the last pass, with the decodes, at the step's end;
readers take those tokens then, and without the setting replays are unchanged."""
import pytest

from sim import LinearCost, build_setup, replay
from traces import SAMPLES_DIR, Client, ReadMode, TraceRequest
from traces.jsonl import read_trace

COST = LinearCost(fixed=0.01, num_prefills=0.002, prefill_tokens=0.001, decode_batch=0.001)
PER_EVENT = Client(read=ReadMode.PER_EVENT)


def trace():
    # a decodes when b, c and d (30 prompt tokens each) arrive together
    return [TraceRequest("a", 0.0, 10, 30),
            TraceRequest("b", 0.1, 30, 5), TraceRequest("c", 0.1, 30, 5, client=PER_EVENT),
            TraceRequest("d", 0.1, 30, 1)]


def run(requests, cost=COST, **settings):
    setup = build_setup(cost, num_blocks=256, block_size=16, max_batch=8, request_s=0.0,
                        delivery_s=0.0, **settings)
    return {o.id: o for o in replay(requests, setup).outcomes}


def test_first_tokens_of_one_step_come_pass_by_pass():
    outcomes = run(trace(), prefill_pass_tokens=40)  # a pass per prompt
    b, c, d = (outcomes[i] for i in "bcd")
    start = b.admitted_s
    assert c.admitted_s == d.admitted_s == start
    # the step: 3 prompts of 30 beside a's decode; each pass alone; scaled to the step
    step = 0.01 + 3 * 0.002 + 90 * 0.001 + 0.001
    prompt_pass, last_pass = 0.01 + 0.002 + 0.03, 0.01 + 0.002 + 0.03 + 0.001
    scale = step / (2 * prompt_pass + last_pass)
    firsts = [o.first_token_engine_s - start for o in (b, c, d)]
    assert firsts == pytest.approx([prompt_pass * scale, 2 * prompt_pass * scale, step], abs=1e-12)
    assert firsts[0] < firsts[1] < firsts[2]
    # the last pass ends with the step: a's token of that step comes then
    assert start + step == pytest.approx(min(t for t in outcomes["a"].token_times_s if t > start))
    assert d.first_token_engine_s in outcomes["a"].token_times_s
    for o in (b, c, d):  # read when delivered, instant and per-event readers alike
        assert o.first_token_client_s == o.token_times_s[0] == o.first_token_engine_s
        assert o.token_times_s == sorted(o.token_times_s)
    # the next step decodes a, b and c (d asked for one token)
    assert b.token_times_s[1] == c.token_times_s[1] == pytest.approx(start + step + 0.013)
    assert [o.tokens_read for o in outcomes.values()] == [30, 5, 5, 1]
    assert all(o.finish_reason == "length" for o in outcomes.values())


def test_without_passes_the_step_delivers_every_first_token_at_its_end():
    outcomes = run(trace())
    assert len({outcomes[i].first_token_engine_s for i in "bcd"}) == 1


@pytest.mark.parametrize("settings", [dict(), dict(max_prefill_tokens=64, chunked_prefill=True),
                                      dict(policy="pause", max_queued=4)])
def test_off_replays_are_unchanged(settings):
    requests = read_trace(SAMPLES_DIR / "mixed.jsonl")
    default = run(requests, **settings)
    assert run(requests, prefill_pass_tokens=None, **settings) == default
    assert run(requests, prefill_pass_tokens=0, **settings) == default
    # passes of more tokens than any step prefills: one pass, as without
    assert run(requests, prefill_pass_tokens=10 ** 9, **settings) == default
    assert run(requests, prefill_pass_tokens=8, **settings) != default
