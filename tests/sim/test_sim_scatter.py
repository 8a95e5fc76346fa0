"""How a host's step times scatter about their price: measured from a calibration's
steps, kept in its profile, and drawn by a replay, the same draws for the same seed."""
import json

import numpy as np
import pytest

from scheduler import PlanFeatures
from sim import ConstantCost, LinearCost, build_profile, build_setup, load_profile, replay, save_profile
from sim.scatter import SCATTER_POINTS, Scatter, measured_scatter
from traces import TraceRequest

LINE = LinearCost(fixed=0.05, decode_batch=0.004, context_tokens=1e-5)


def clocked_log(n=2000, seed=4):
    """Decode steps at their price times 0.9 (three in ten), 1.0 (six in ten) or
    1.3 (one in ten): a mean of 1. The host runs 15% slow for a fifth of the log."""
    rng = np.random.default_rng(seed)
    steps, clock = [], 1.7e9
    for i in range(n):
        batch = int(rng.integers(1, 17))
        f = PlanFeatures(0, 0, 0, batch, batch * int(rng.integers(20, 400)))
        factor = rng.choice([0.9, 1.0, 1.3], p=[0.3, 0.6, 0.1])
        slow = 1.15 if 800 <= i < 1200 else 1.0
        seconds = LINE.cost(f) * factor * slow
        steps.append({**f.as_dict(), "step": i + 1, "start_s": clock - 1.7e9, "duration_s": seconds,
                      "start_unix": clock})
        clock += seconds
    return steps


def test_the_scatter_is_the_hosts_spread_about_the_price_with_its_slow_minutes_taken_out():
    scatter = measured_scatter(clocked_log(), LINE)
    assert len(scatter) == SCATTER_POINTS
    assert np.mean(scatter) == pytest.approx(1.0, abs=1e-12)
    assert scatter == sorted(scatter)
    # a fifth of the log 15% slow: read as the host's pace, not as scatter
    assert scatter[:10] == pytest.approx([0.9] * 10, rel=0.02)
    assert scatter[14:34] == pytest.approx([1.0] * 20, rel=0.02)
    assert scatter[-3:] == pytest.approx([1.3] * 3, rel=0.03)


def test_a_log_without_the_clock_measures_no_scatter():
    unclocked = [{k: v for k, v in s.items() if k != "start_unix"} for s in clocked_log(200)]
    assert measured_scatter(unclocked, LINE) == []


def test_a_profile_keeps_its_scatter(tmp_path):
    log = tmp_path / "steps.jsonl"
    log.write_text("".join(json.dumps(s) + "\n" for s in clocked_log()))
    profile = build_profile(log, hardware="h", model="m", dtype="fp32")
    assert len(profile.step_scatter) == SCATTER_POINTS
    assert np.mean(profile.step_scatter) == pytest.approx(1.0)
    save_profile(profile, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json").step_scatter == profile.step_scatter


def token_gaps(step_scatter=(0.5, 1.5), seed=0, steady_steps=False):
    """Every gap between two tokens of two streams on an engine whose steps are
    priced at 0.1 s, the second stream arriving while the first decodes."""
    trace = [TraceRequest("a", 0.0, 16, 30), TraceRequest("b", 1.05, 16, 30)]
    setup = build_setup(ConstantCost(0.1), step_scatter=step_scatter, scatter_seed=seed,
                        steady_steps=steady_steps, num_blocks=64)
    result = replay(trace, setup)
    return [g for o in result.outcomes for g in o.gaps_s]


def test_each_step_takes_its_price_times_a_draw_from_the_scatter():
    gaps = token_gaps()
    assert len(gaps) == 58
    assert all(g == pytest.approx(0.05) or g == pytest.approx(0.15) for g in gaps)
    assert 15 < sum(g == pytest.approx(0.05) for g in gaps) < 43
    assert token_gaps() == gaps  # the same draws for the same seed
    assert token_gaps(seed=1) != gaps
    assert token_gaps(steady_steps=True) == pytest.approx([0.1] * 58)
    assert token_gaps(step_scatter=()) == pytest.approx([0.1] * 58)


def test_a_scatter_needs_positive_quantiles():
    with pytest.raises(ValueError, match="positive"):
        Scatter((), seed=0)
    with pytest.raises(ValueError, match="positive"):
        Scatter((1.0, 0.0), seed=0)
