"""What a profile's fit covered: its held-out error by kind of step, the ranges of
its features, and a replay that goes past them saying so, and how far."""
import json

import numpy as np
import pytest

from scheduler import PlanFeatures
from sim import LinearCost, build_profile, build_setup, fit, load_profile, replay, save_profile
from sim.fit import KINDS, step_kind
from sim.fitted_ranges import Beyond, FittedRanges, RangeWatch
from traces import TraceRequest

from test_sim_fit import TRUE, write_log


def kinds_log(n=800, seed=2):
    """Steps of every kind; the mixed ones cost a third more than the linear terms
    say, a cost the fit cannot carry without spoiling the others."""
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(n):
        kind = KINDS[i % 4]
        prompts = rng.integers(16, 512, 0 if kind == "decode" else int(rng.integers(1, 4)))
        batch = 0 if kind == "prefill" else int(rng.integers(1, 33))
        f = PlanFeatures(len(prompts), int(prompts.sum()), int((prompts ** 2).sum()), batch,
                         int(batch * rng.integers(20, 400)))
        duration = TRUE.cost(f) * (4 / 3 if kind == "mixed" else 1.0)
        steps.append({"step": i + 1, "start_s": 0.0, "duration_s": duration, **f.as_dict(),
                      "chunked": kind == "chunked"})
    return steps


def test_each_logged_step_has_one_kind():
    base = {"num_prefills": 0, "decode_batch": 8}
    assert step_kind(base) == "decode"
    assert step_kind({**base, "num_prefills": 2}) == "mixed"
    assert step_kind({**base, "num_prefills": 1, "decode_batch": 0}) == "prefill"
    assert step_kind({**base, "num_prefills": 1, "chunked": True}) == "chunked"
    assert step_kind({**base, "chunked": False}) == "decode"


def test_the_held_out_error_is_told_by_kind_and_shows_the_kind_the_fit_misses():
    steps = kinds_log()
    _, report = fit(steps, holdout_fraction=0.25, seed=0)
    assert list(report.by_kind) == list(KINDS)
    assert sum(k["steps"] for k in report.by_kind.values()) == report.holdout_steps == 200
    worst = max(report.by_kind, key=lambda kind: report.by_kind[kind]["mape"])
    assert worst == "mixed"
    # the pooled figure is an average that hides it
    assert report.by_kind["mixed"]["mape"] > 1.5 * report.mape
    line = report.describe_kinds()
    assert line.startswith("decode ") and "mixed " in line and "steps)" in line


def test_a_profile_keeps_the_largest_of_each_feature_it_was_fitted_on(tmp_path):
    steps = kinds_log(n=200)
    for i, s in enumerate(steps):  # chunks that continue prompts begun before them
        if s["chunked"]:
            s["prefix_tokens"] = 64 * (i % 7 + 1)
    profile = build_profile(write_log(tmp_path / "steps.jsonl", steps), "h", "m", "fp32")
    assert profile.ranges() == FittedRanges(
        num_prefills=max(s["num_prefills"] for s in steps),
        prefill_tokens=max(s["prefill_tokens"] for s in steps),
        decode_batch=max(s["decode_batch"] for s in steps),
        context_tokens=max(s["context_tokens"] for s in steps),
        prefix_tokens=max(s["prefix_tokens"] for s in steps))
    assert profile.ranges().prefix_tokens == 448
    assert set(profile.fit["by_kind"]) == set(KINDS)
    save_profile(profile, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json").ranges() == profile.ranges()
    # a profile saved before ranges were kept loads, and knows none
    data = json.loads((tmp_path / "p.json").read_text())
    del data["fitted_ranges"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert load_profile(tmp_path / "old.json").ranges() is None


def test_the_watch_answers_as_the_model_and_keeps_the_largest_past_each_range():
    ranges = FittedRanges(num_prefills=2, prefill_tokens=512, decode_batch=16, context_tokens=4000)
    watch = RangeWatch(TRUE, ranges)
    inside = PlanFeatures(2, 512, 512 ** 2, 16, 4000)
    assert watch.cost(inside) == TRUE.cost(inside) and watch.beyond() == []
    for f in (PlanFeatures(0, 0, 0, 24, 3000), PlanFeatures(0, 0, 0, 32, 9000),
              PlanFeatures(0, 0, 0, 20, 5000)):
        assert watch.cost(f) == TRUE.cost(f)
    assert watch.beyond() == [Beyond("decode_batch", 16, 32), Beyond("context_tokens", 4000, 9000)]
    # a profile from before chunks' prefixes were kept fitted none
    chunk = PlanFeatures(1, 64, 64 * 600, 8, 800, 536)
    assert watch.cost(chunk) == TRUE.cost(chunk)
    assert watch.beyond()[-1] == Beyond("prefix_tokens", 0, 536)
    assert watch.beyond()[0].describe() == (
        "sequences decoded in one step (decode_batch) reached 32; the profile was fitted up to "
        "16 (2.0 times): step costs there are extrapolated")


def test_a_replay_past_its_fit_says_which_features_and_how_far():
    trace = [TraceRequest(f"r{i}", 0.01 * i, 300, 20) for i in range(12)]
    ranges = FittedRanges(num_prefills=4, prefill_tokens=2000, decode_batch=4, context_tokens=100_000)
    cost = LinearCost(fixed=0.01, decode_batch=1e-3)
    within = replay(trace, build_setup(cost, max_batch=4, num_blocks=512))
    watched = replay(trace, build_setup(cost, max_batch=8, num_blocks=512, fitted=ranges))
    assert within.beyond_fitted == []
    assert [b.feature for b in watched.beyond_fitted] == ["decode_batch"]
    assert watched.beyond_fitted[0].reached == 8
    # the watch only looks: the same replay without it is the same to the bit
    unwatched = replay(trace, build_setup(cost, max_batch=8, num_blocks=512))
    assert unwatched.summary == watched.summary and unwatched.steps == watched.steps
    assert [o.token_times_s for o in unwatched.outcomes] == [o.token_times_s for o in watched.outcomes]


@pytest.mark.parametrize("reached,fitted,text", [(9000, 4000, "2.2 times"), (3, 0, "none fitted")])
def test_how_far_is_a_ratio_or_says_none_was_fitted(reached, fitted, text):
    assert text in Beyond("context_tokens", fitted, reached).describe()
