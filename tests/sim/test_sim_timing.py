"""Replays with a constant step cost whose every time is worked out by hand."""
import pytest

from scheduler import SchedulerConfig, SubmitRefused
from sim import ConstantCost, Overheads, ReplaySetup, replay
from sim.serving.client import REFUSALS
from traces.outcome import Refusal
from traces.record import Client, TraceRequest


def request(id, arrival=0.0, prompt=10, new=3, **client):
    return TraceRequest(id, arrival, prompt, new, client=Client(**client))


def setup(cost=1.0, max_batch=8, num_blocks=64, max_waiting=1024, **overheads):
    return ReplaySetup(SchedulerConfig(num_blocks=num_blocks, block_size=16, max_batch=max_batch,
                                       max_waiting=max_waiting),
                       ConstantCost(cost), overheads=Overheads(**overheads))


def test_second_request_waits_for_the_first_with_one_batch_slot():
    result = replay([request("a"), request("b")], setup(max_batch=1))
    a, b = result.outcomes
    # a: prefill 0-1, decodes 1-2, 2-3; b is admitted at 3: prefill 3-4, decodes to 6.
    assert (a.admitted_s, a.first_token_engine_s, a.token_times_s, a.finish_s) == (0, 1, [1, 2, 3], 3)
    assert (b.admitted_s, b.first_token_engine_s, b.token_times_s, b.finish_s) == (3, 4, [4, 5, 6], 6)
    assert a.finish_reason == b.finish_reason == "length"
    assert (a.tokens_generated, a.tokens_read, b.tokens_generated, b.tokens_read) == (3, 3, 3, 3)
    s = result.summary
    assert (s.makespan_s, s.ttft_client_p50_s, s.gap_p99_s, s.throughput_tok_s) == (6, 2.5, 1, 1)
    assert (s.peak_running, s.peak_waiting, s.peak_blocks_reserved) == (1, 1, 1)
    assert result.series.time_s.tolist() == [1, 2, 3, 4, 5, 6]
    assert result.series.waiting.tolist() == [1, 1, 1, 0, 0, 0]


def test_request_overhead_and_delivery_delay():
    # a is submitted at 0.5 and prefilled 0.5-1.5; b, submitted at 0.75 during that
    # step, is admitted at 1.5 beside a's decode. Events reach clients 0.125 late.
    trace = [request("a", 0.0, new=2), request("b", 0.25, new=2)]
    a, b = replay(trace, setup(request_s=0.5, delivery_s=0.125)).outcomes
    assert (a.admitted_s, a.first_token_engine_s, a.first_token_client_s) == (0.5, 1.5, 1.625)
    assert (a.token_times_s, a.finish_s) == ([1.625, 2.625], 2.625)
    assert (b.admitted_s, b.first_token_engine_s, b.first_token_client_s) == (1.5, 2.5, 2.625)
    assert (b.token_times_s, b.finish_s, b.ttft_client_s) == ([2.625, 3.625], 3.625, 2.375)


@pytest.mark.parametrize("detect_s, after_leave", [(0.0, 0), (0.375, 2), (0.625, 3)])
def test_leaver_after_n_tokens_wastes_the_steps_before_the_cancel_lands(detect_s, after_leave):
    # Steps end every 0.25 s; the client reads token 2 at 0.5 and leaves. The steps
    # planned from 0.5 until the disconnect reaches the inbox (0.5 + detect) still run.
    result = replay([request("a", new=10, leave_after_tokens=2)],
                    setup(cost=0.25, disconnect_detect_s=detect_s))
    (o,) = result.outcomes
    assert (o.left_s, o.finish_s, o.token_times_s, o.tokens_read) == (0.5, 0.5, [0.25, 0.5], 2)
    assert (o.tokens_after_leave, o.tokens_generated) == (after_leave, 2 + after_leave)
    assert o.finish_reason == "cancelled"
    assert result.summary.wasted_tokens == after_leave
    assert result.series.time_s[-1] == 0.5 + 0.25 * after_leave


@pytest.mark.parametrize("delivery_s, after_leave", [(0.0, 1), (0.125, 2)])
def test_a_server_that_only_writes_learns_of_a_leave_from_the_next_token(delivery_s, after_leave):
    # Steps end every 0.25 s; the client reads token 2 at 0.5 (plus the delivery)
    # and leaves. Nothing tells the server until token 3, made by the step of
    # 0.5-0.75, is written: at once, before the next plan, or with a delivery
    # delay after the step of 0.75-1.0 was planned, which makes token 4 too.
    base = setup(cost=0.25, delivery_s=delivery_s)
    result = replay([request("a", new=10, leave_after_tokens=2)],
                    ReplaySetup(base.config, base.cost, overheads=base.overheads,
                                disconnect_notice="write"))
    (o,) = result.outcomes
    assert (o.left_s, o.tokens_read) == (0.5 + delivery_s, 2)
    assert (o.tokens_after_leave, o.tokens_generated) == (after_leave, 2 + after_leave)
    assert o.finish_reason == "cancelled"
    assert result.series.time_s[-1] == 0.5 + 0.25 * after_leave
    # token 3 went into the failed write; what came after it (token 4, the final
    # event of the cancel) is dropped
    assert result.events_discarded == after_leave


def test_leaver_after_seconds():
    # Leaves at 0.625, between tokens at 0.5 and 0.75; the step planned at 0.5 ends
    # after it left, and the cancel lands at the plan of 0.75.
    (o,) = replay([request("a", new=10, leave_after_s=0.625)], setup(cost=0.25)).outcomes
    assert (o.left_s, o.tokens_read, o.tokens_after_leave, o.tokens_generated) == (0.625, 2, 1, 3)
    assert o.finish_reason == "cancelled"


def test_a_request_whose_client_leaves_before_it_is_sent_never_reaches_the_engine():
    (o,) = replay([request("a", leave_after_s=0.25)], setup(request_s=0.5)).outcomes
    assert (o.left_s, o.admitted_s, o.tokens_generated, o.finish_reason) == (0.25, None, 0, "cancelled")


def test_refusals_are_recorded_and_the_rest_runs():
    # One waiting slot: b arrives while a waits for the first step. c needs 7 blocks of 16.
    trace = [request("a", new=6), request("b"), request("c", prompt=100, new=10),
             request("d", arrival=10.0)]
    result = replay(trace, setup(max_batch=1, num_blocks=4, max_waiting=1))
    a, b, c, d = result.outcomes
    assert (b.refused, b.finish_s, b.tokens_generated) == ("queue_full", 0.0, 0)
    assert (c.refused, c.finish_s) == ("too_large", 0.0)
    assert (a.refused, a.finish_reason, a.finish_s) == (None, "length", 6)
    assert (d.refused, d.finish_reason, d.finish_s) == (None, "length", 13)
    assert result.summary.refused == 2 and result.summary.completed == 2


def test_every_refusal_of_the_core_has_its_name_in_the_outcome_vocabulary():
    assert set(REFUSALS) == set(SubmitRefused.__subclasses__())
    assert set(REFUSALS.values()) == {Refusal.QUEUE_FULL, Refusal.KEY_LIMIT, Refusal.TOO_LARGE,
                                      Refusal.INVALID}


def test_outcomes_come_back_in_trace_order_and_ids_must_be_unique():
    trace = [request("late", arrival=2.0), request("early", arrival=0.0)]
    assert [o.id for o in replay(trace, setup()).outcomes] == ["late", "early"]
    with pytest.raises(ValueError, match="unique"):
        replay([request("x"), request("x")], setup())
