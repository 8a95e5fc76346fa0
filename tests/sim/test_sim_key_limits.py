"""Per-key limits in the simulator: the hub submits each request with its trace
key, the core refuses what is over the key's limit, the outcome says `key_limit`,
and what a key held is given back by the end of the replay. Every step takes 1 s,
so which requests are over the limit is worked out by hand from the arrivals and
the finishes."""
import json
import subprocess
import sys
from pathlib import Path

from scheduler import SchedulerConfig
from scheduler.settings import ServeSettings
from sim import ConstantCost, ReplaySetup, build_setup, replay
from sim.settings import SimSettings, replay_settings
from sim.summary import format_refusals
from traces.jsonl import write_trace
from traces.outcome import read_outcomes
from traces.record import TraceRequest

ROOT = Path(__file__).resolve().parents[2]


def request(id, arrival, key, new=4):
    return TraceRequest(id, arrival, 4, new, key=key)


# heavy sends up to five streams at once, light two, and some come without a key.
# h0, h1, l0 are admitted at 0 and make 4 tokens each: they hold their streams
# until the step that ends at 4. With two streams a key, h2 (0.5) and h3 (3.5) find
# heavy at its limit; h4 and h5 (after 4) take the streams h0 and h1 gave back, and
# h6 finds them held again.
TRACE = [
    request("h0", 0.0, "heavy"), request("h1", 0.0, "heavy"), request("l0", 0.0, "light"),
    request("h2", 0.5, "heavy"), request("l1", 0.5, "light"), request("anon0", 0.5, None),
    request("anon1", 0.5, None), request("anon2", 0.5, None), request("h3", 3.5, "heavy"),
    request("h4", 4.5, "heavy"), request("h5", 4.6, "heavy"), request("h6", 4.7, "heavy"),
]
OVER_THE_LIMIT = {"h2", "h3", "h6"}


class KeepCore:
    """A probe that keeps the replay's core, to look at it after the replay."""

    def __init__(self):
        self.core = None

    def probe(self, env, core):
        self.core = core
        return
        yield


def setup(max_batch=16, **limits):
    return ReplaySetup(SchedulerConfig(num_blocks=64, block_size=4, max_batch=max_batch,
                                       **limits), ConstantCost(1.0))


def run(trace, config):
    keep = KeepCore()
    result = replay(trace, config, probe=keep.probe)
    return result, keep.core


def test_exactly_the_requests_over_the_stream_limit_are_refused():
    result, core = run(TRACE, setup(max_streams_per_key=2))
    refused = {o.id: o.refused for o in result.outcomes if o.refused is not None}
    assert refused == dict.fromkeys(OVER_THE_LIMIT, "key_limit")
    by_id = {o.id: o for o in result.outcomes}
    for id in OVER_THE_LIMIT:  # answered at once, nothing made
        o = by_id[id]
        assert (o.headers_s, o.finish_s, o.admitted_s, o.tokens_generated) == (
            o.arrival_s, o.arrival_s, None, 0)
    # Everything else ran to its end; h4 and h5 on the streams h0 and h1 gave back.
    served = [o for o in result.outcomes if o.id not in OVER_THE_LIMIT]
    assert {(o.finish_reason, o.tokens_read) for o in served} == {("length", 4)}
    assert (by_id["h0"].finish_s, by_id["h4"].admitted_s, by_id["h5"].admitted_s) == (4.0, 5.0, 5.0)
    assert result.refusals == {"key_limit": 3}
    assert (result.summary.refused, result.summary.completed) == (3, 9)
    assert core.is_drained() and core.keys.holding() == {}


def test_without_a_limit_the_same_trace_is_all_served():
    result, core = run(TRACE, setup())
    assert result.refusals == {} and result.summary.completed == len(TRACE)
    assert core.is_drained()


def test_the_waiting_limit_counts_until_the_first_admission():
    # One slot: w0 runs 0-2; w1 waits from 0.2 until 2, so w2 (0.4) is over heavy's
    # one waiting request; w3 (2.5) waits alone, then w4 (2.6) is over it again.
    # light's request waits beside heavy's: the limit is per key.
    trace = [request("w0", 0.0, "heavy", new=2), request("w1", 0.2, "heavy", new=2),
             request("w2", 0.4, "heavy"), request("l0", 0.5, "light", new=2),
             request("w3", 2.5, "heavy", new=2), request("w4", 2.6, "heavy")]
    result, core = run(trace, setup(max_batch=1, max_waiting_per_key=1))
    assert {o.id: o.refused for o in result.outcomes} == {
        "w0": None, "w1": None, "w2": "key_limit", "l0": None, "w3": None, "w4": "key_limit"}
    assert [o.admitted_s for o in result.outcomes if o.refused is None] == [0.0, 2.0, 4.0, 6.0]
    assert core.is_drained() and core.keys.holding() == {}


def test_the_server_settings_carry_the_limits_into_the_replay():
    flat = replay_settings(ServeSettings(max_streams_per_key=2, max_waiting_per_key=1),
                           SimSettings(), 64, {})
    config = build_setup(ConstantCost(1.0), **flat).config
    assert (config.max_streams_per_key, config.max_waiting_per_key) == (2, 1)
    defaults = build_setup(ConstantCost(1.0), **replay_settings(ServeSettings(), SimSettings(),
                                                                64, {})).config
    assert (defaults.max_streams_per_key, defaults.max_waiting_per_key) == (None, None)


def test_the_command_line_applies_the_limit_to_a_keyed_trace(tmp_path):
    trace = tmp_path / "keyed.jsonl"
    write_trace(trace, TRACE)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "sim", "replay", trace, "--constant-cost", "1", "--num-blocks", "64",
         "--block-size", "4", "--max-batch", "16", "--max-streams-per-key", "2", "--quiet",
         "--out", out], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    refused = {o.id for o in read_outcomes(out / "outcomes.parquet") if o.refused == "key_limit"}
    assert refused == OVER_THE_LIMIT
    assert json.loads((out / "setup.json").read_text())["max_streams_per_key"] == 2


def test_refusals_are_shown_one_line_a_reason():
    assert format_refusals({"queue_full": 12, "key_limit": 3}).splitlines() == [
        "refused queue_full                 12", "refused key_limit                   3"]
    assert format_refusals({}) == ""
