"""SLO attainment and goodput, worked out by hand on a few requests, the same
from a list of outcomes, a replay and a sweep."""
import pytest

from sim import ConstantCost, build_setup, replay
from sim.sweep import format_sweep, sweep
from traces.outcome import RequestOutcome
from traces.record import Client, TraceRequest
from traces.slo import Slo
from traces.summary import summarize


def read(id, arrival, times, reason="length", **kw):
    return RequestOutcome(id, arrival, 10, len(times), first_token_client_s=times[0] if times else None,
                          token_times_s=times, finish_s=times[-1] if times else arrival + 0.1,
                          finish_reason=reason, tokens_generated=len(times),
                          tokens_read=len(times), **kw)


OUTCOMES = [
    read("fast", 0.0, [0.2, 0.3, 0.4, 0.5]),            # TTFT 0.2, TPOT 0.1
    read("late", 1.0, [1.9, 2.0, 2.1]),                  # TTFT 0.9
    read("slow", 2.0, [2.1, 2.5, 2.9]),                  # TPOT 0.4
    read("one", 3.0, [3.3]),                             # TTFT 0.3, no TPOT to miss
    read("left", 4.0, [4.1, 4.2], reason="cancelled", left_s=4.25),  # not judged
    read("dropped", 5.0, [5.1, 5.2], reason="slow_client"),          # misses
    RequestOutcome("refused", 6.0, 10, 4, headers_s=6.0, finish_s=6.0, refused="queue_full"),
]
"""The makespan runs from 0.0 to 6.0."""


@pytest.mark.parametrize("slo, met, good_tokens", [
    (Slo(ttft_s=0.5), {"fast", "slow", "one"}, 4 + 3 + 1),
    (Slo(tpot_s=0.2), {"fast", "late", "one"}, 4 + 3 + 1),
    (Slo(ttft_s=0.5, tpot_s=0.2), {"fast", "one"}, 4 + 1),
    (Slo(ttft_s=0.1), set(), 0),
])
def test_attainment_and_goodput_by_hand(slo, met, good_tokens):
    s = summarize(OUTCOMES, slo)
    assert all(slo.met(o) == (o.id in met) for o in OUTCOMES)
    assert s.slo_attainment == len(met) / 6  # every request but the one that left
    assert s.goodput_tok_s == good_tokens / 6.0


def test_no_slo_no_attainment():
    s = summarize(OUTCOMES)
    assert (s.slo_attainment, s.goodput_tok_s) == (None, None)


@pytest.mark.parametrize("targets", [{}, {"ttft_s": 0.0}, {"tpot_s": -1.0}])
def test_an_slo_needs_a_positive_target(targets):
    with pytest.raises(ValueError, match="SLO"):
        Slo(**targets)


def test_a_replay_and_a_sweep_judge_their_requests_by_the_slo():
    # one slot, 0.1 s a step, 4 tokens each, all arriving at 0: request i waits for
    # the i before it, so its first token comes at 0.1 + 0.4 i
    trace = [TraceRequest(f"r{i}", 0.0, 8, 4, client=Client()) for i in range(5)]
    settings = {"max_batch": 1, "num_blocks": 64}
    result = replay(trace, build_setup(ConstantCost(0.1), slo_ttft_s=0.6, **settings))
    ttfts = sorted(o.first_token_client_s - o.arrival_s for o in result.outcomes)
    assert ttfts == pytest.approx([0.1, 0.5, 0.9, 1.3, 1.7])
    assert result.summary.slo_attainment == 2 / 5
    assert result.summary.goodput_tok_s == pytest.approx(8 / result.summary.makespan_s)
    rows = sweep(trace, ConstantCost(0.1), settings, {"slo_ttft_s": [0.6, 1.0]}, jobs=1)
    assert [summary.slo_attainment for _, summary, _ in rows] == [2 / 5, 3 / 5]
    header = format_sweep(rows).splitlines()[0].split()
    assert header[-2:] == ["slo_attainment", "goodput_tok_s"]
