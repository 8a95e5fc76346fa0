"""A replay that holds only what is in flight: its outcomes handed over as each
request ends, its time series written or only tallied, the step times its
instant readers no longer need forgotten, and its percentiles spilled to a file.
Whatever it keeps, it is the same replay: the same outcomes, summary and steps as
one that keeps everything in memory."""
import dataclasses

import numpy as np
import pytest

import sim.serving.hub
import sim.timeseries
from scheduler import SchedulerConfig, make_policy
from sim import LinearCost, Overheads, ReplaySetup, TimeSeries, replay
from sim.serving import step_times
from traces import ClientMix, LeaveHow, Uniform, generate
from traces.percentiles import Percentiles
from traces.summary import _done_s

COST = LinearCost(fixed=4e-3, num_prefills=2e-4, prefill_tokens=2e-5, decode_batch=3e-4,
                  context_tokens=1e-7)


def trace(seed: int):
    """Mostly instant readers (their tokens are steps' times), some slow readers
    and some leavers, by FIN and RST, after tokens and after seconds."""
    requests = generate(rate=40.0, count=400, prompt_lengths=Uniform(8, 300),
                        output_lengths=Uniform(4, 120), seed=seed)
    rng = np.random.default_rng(seed)
    slow = ClientMix(slow=0.15, slow_pause_s=0.5, leave=0.1, leave_after_tokens=9,
                     leave_how=LeaveHow.RST).assign(len(requests), rng)
    early = ClientMix(leave=0.1, leave_after_s=0.4).assign(len(requests), rng)
    return [dataclasses.replace(r, client=a if a.slow or a.leaves else b)
            for r, a, b in zip(requests, slow, early)]


SETUPS = {
    "unbounded": ReplaySetup(SchedulerConfig(num_blocks=400, block_size=16, max_batch=16), COST),
    "drop": ReplaySetup(SchedulerConfig(num_blocks=400, block_size=16, max_batch=16), COST,
                        make_policy("drop", stall_timeout_s=0.2),
                        Overheads(delivery_s=0.001, disconnect_detect_s=0.02, transport_bytes=600)),
    "pause_then_drop, optimistic": ReplaySetup(
        SchedulerConfig(num_blocks=120, block_size=16, max_batch=16, admission="optimistic"),
        COST, make_policy("pause_then_drop", max_queued=4, stall_timeout_s=0.3),
        Overheads(transport_bytes=600)),
    "grace": ReplaySetup(SchedulerConfig(num_blocks=400, block_size=16, max_batch=8), COST,
                         resume_grace_s=0.25),
}


class Kept(step_times.StepTimes):
    """The hub's step times, kept where the test can look at them."""

    made: list = []

    def __init__(self):
        super().__init__()
        Kept.made.append(self)


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_a_replay_holding_only_what_is_in_flight_is_the_same_replay(name, monkeypatch):
    requests, setup = trace(len(name)), SETUPS[name]
    whole = replay(requests, setup)
    assert whole.summary.left > 0 and whole.summary.completed > 0
    if "drop" in name:
        assert whole.summary.dropped > 0
    monkeypatch.setattr(step_times, "FORGET_AT", 16)
    monkeypatch.setattr(Percentiles.__init__, "__defaults__", (64,))
    monkeypatch.setattr(sim.serving.hub, "StepTimes", Kept)
    Kept.made = []
    ended = []
    lean = replay(requests, setup, records=ended.append, series=TimeSeries.tallied())
    assert lean.outcomes == [] and len(ended) == len(requests)
    in_trace = {r.id: i for i, r in enumerate(requests)}
    assert sorted(ended, key=lambda o: in_trace[o.id]) == whole.outcomes
    assert lean.summary == whole.summary
    assert (lean.steps, lean.events_discarded, lean.refusals) == (
        whole.steps, whole.events_discarded, whole.refusals)
    assert len(lean.series) == len(whole.series)
    (times,) = Kept.made
    assert len(times) == whole.steps - sum(1 for t in whole.series.tokens if not t)
    assert times.first > len(times) // 2 and len(times.times) < len(times) // 4


def test_each_outcome_is_handed_over_when_its_request_has_ended():
    requests, setup = trace(7), SETUPS["drop"]
    clock = []

    def probe(env, core):
        clock.append(env)
        return
        yield

    handed = []
    result = replay(requests, setup, probe=probe, records=lambda o: handed.append((clock[0].now, o)))
    times = [now for now, _ in handed]
    assert times == sorted(times)
    assert all(_done_s(o) <= now for now, o in handed)
    # handed over as the replay goes, not all at its end
    assert sum(now < result.summary.makespan_s / 2 for now in times) > len(requests) / 4


def test_a_written_series_is_the_series_kept_in_memory(tmp_path, monkeypatch):
    requests, setup = trace(3), SETUPS["pause_then_drop, optimistic"]
    kept = replay(requests, setup).series
    monkeypatch.setattr(sim.timeseries, "CHUNK_ROWS", 50)
    path = tmp_path / "timeseries.npy"
    written = TimeSeries.written(path)
    replay(requests, setup, series=written)
    written.close()
    table = np.load(path)
    assert len(table) == len(kept) > 50 * 10
    assert [dict(zip(table.dtype.names, row)) for row in table.tolist()] == kept.rows()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timeseries.npy"]
    for column in ("running", "waiting", "paused", "blocks_reserved"):
        assert written.peak(column) == kept.peak(column)
    assert written.tokens_made() == kept.tokens_made() == int(table["tokens"].sum())


def test_a_trace_read_as_it_goes_is_the_same_replay():
    requests, setup = trace(5), SETUPS["drop"]
    whole = replay(requests, setup)
    ended = []
    read_as_it_goes = replay(iter(requests), setup, records=ended.append)
    assert read_as_it_goes.summary == whole.summary
    assert sorted(ended, key=lambda o: o.id) == sorted(whole.outcomes, key=lambda o: o.id)


def test_a_trace_read_as_it_goes_must_arrive_in_order_with_ids_unique_in_flight():
    requests, setup = trace(6), SETUPS["unbounded"]
    late = [requests[1], requests[0], *requests[2:]]
    with pytest.raises(ValueError, match="before the one before it"):
        replay(iter(late), setup)
    twice = [requests[0], dataclasses.replace(requests[1], id=requests[0].id)]
    with pytest.raises(ValueError, match="already in flight"):
        replay(iter(twice), setup)
    # an id may come again once its request has ended
    again = [requests[0], dataclasses.replace(requests[1], id=requests[0].id,
                                              arrival_s=requests[0].arrival_s + 600.0)]
    assert replay(iter(again), setup).summary.requests == 2
