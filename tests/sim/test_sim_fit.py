"""Fitting a LinearCost from a step log, and cost profiles on disk."""
import dataclasses
import json

import numpy as np
import pytest

import sim.profile
from scheduler import PlanFeatures
from sim import (FEATURES, LinearCost, ScaledCost, build_profile, fit, load_profile,
                 load_step_log, pace, save_profile)
from sim.fit import KINDS

TRUE = LinearCost(fixed=3e-3, num_prefills=4e-4, prefill_tokens=2e-5, prefill_tokens_sq=5e-9,
                  decode_batch=1.5e-4, context_tokens=4e-8, prefix_tokens=3e-6)


def synthetic_log(n=600, noise=1e-4, seed=1):
    """Steps as a live engine logs them: a few prefills now and then, some of them
    chunks that continue a prompt over the tokens before them, a decode batch."""
    rng = np.random.default_rng(seed)
    steps = []
    start = 0.0
    for i in range(n):
        prompts = rng.integers(16, 2048, rng.integers(0, 4) if rng.random() < 0.4 else 0)
        before = rng.integers(0, 4096, len(prompts)) * (rng.random(len(prompts)) < 0.5)
        batch = int(rng.integers(0 if len(prompts) else 1, 64))
        f = PlanFeatures(len(prompts), int(prompts.sum()), int((prompts * (before + prompts)).sum()),
                         batch, int(rng.integers(batch * 20, batch * 2000 + 1)), int(before.sum()))
        duration = TRUE.cost(f) * (1 + noise * rng.standard_normal())
        steps.append({"step": i + 1, "start_s": start, "duration_s": duration, **f.as_dict(),
                      "device": "cuda:0"})
        start += duration
    return steps


def test_fit_recovers_known_coefficients_within_one_percent():
    cost, report = fit(synthetic_log(), holdout_fraction=0.2, seed=0)
    fitted, true = cost.coefficients(), TRUE.coefficients()
    for name in FEATURES:
        assert fitted[name] == pytest.approx(true[name], rel=0.01), name
    assert (report.train_steps, report.holdout_steps) == (480, 120)
    assert report.mape < 1e-3 and report.p90_rel_error < 2e-3 and report.r2 > 0.9999


def test_fit_reports_the_error_on_held_out_steps():
    """A log no model fits: every step measured twice, a fifth below and a fifth above
    its cost. The fit prices about the middle (the training steps hold some pairs
    whole, some halves), so a held-out step is off by about a quarter of its seconds
    (below) or a sixth (above), and the report says so."""
    steps = [dict(s, duration_s=s["duration_s"] * factor)
             for s in synthetic_log(n=100, noise=0.0) for factor in (0.8, 1.2)]
    _, report = fit(steps, holdout_fraction=0.25, seed=3)
    assert report.holdout_steps == 50
    for error in [report.mape, *(kind["mape"] for kind in report.by_kind.values())]:
        assert 1 / 6 < error < 1 / 4
    assert 0.22 < report.p90_rel_error < 0.3


def test_the_pace_is_the_steps_seconds_over_their_price():
    steps = synthetic_log(n=50, noise=0.0)
    assert pace(steps, TRUE) == pytest.approx(1.0)
    # a host a fifth slower on the first half of the steps only
    slow = [dict(s, duration_s=s["duration_s"] * (1.2 if i < 25 else 1.0))
            for i, s in enumerate(steps)]
    first = sum(s["duration_s"] for s in steps[:25])
    total = sum(s["duration_s"] for s in steps)
    assert pace(slow, TRUE) == pytest.approx((total + 0.2 * first) / total)
    # priced by a model scaled to that pace, the steps take their price again
    assert pace(slow, ScaledCost(TRUE, pace(slow, TRUE))) == pytest.approx(1.0)
    f = PlanFeatures(1, 100, 10_000, 4, 800, 0)
    assert ScaledCost(TRUE, 1.5).cost(f) == pytest.approx(1.5 * TRUE.cost(f))
    with pytest.raises(ValueError, match="factor must be positive"):
        ScaledCost(TRUE, 0.0)
    with pytest.raises(ValueError, match="no steps"):
        pace([], TRUE)


def test_fit_coefficients_are_never_negative_and_unused_features_get_zero():
    steps = [{"num_prefills": 0, "prefill_tokens": 0, "prefill_tokens_sq": 0, "decode_batch": b,
              "context_tokens": 100 * b, "duration_s": 0.01 - 1e-5 * b} for b in range(1, 41)]
    cost, _ = fit(steps)
    assert all(v >= 0 for v in cost.coefficients().values())
    assert cost.num_prefills == cost.prefill_tokens == cost.prefill_tokens_sq == 0


def test_a_log_and_a_profile_from_before_chunk_prefixes_were_recorded_still_serve(tmp_path):
    steps = synthetic_log(n=300)
    for s in steps:
        s["duration_s"] -= TRUE.prefix_tokens * s.pop("prefix_tokens")
    cost, _ = fit(steps)
    assert cost.prefix_tokens == 0
    assert cost.context_tokens == pytest.approx(TRUE.context_tokens, rel=0.01)
    profile = build_profile(write_log(tmp_path / "steps.jsonl", steps), "h", "m", "fp32")
    data = json.loads(json.dumps(dataclasses.asdict(profile)))
    data["features"].remove("prefix_tokens")
    del data["coefficients"]["prefix_tokens"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load_profile(tmp_path / "old.json")
    f = PlanFeatures(1, 64, 64 * 512, 8, 800, 448)
    assert old.cost_model().cost(f) == profile.cost_model().cost(f)


def test_fit_refuses_too_few_steps_and_bad_durations():
    with pytest.raises(ValueError, match="too few"):
        fit(synthetic_log(n=6))
    steps = synthetic_log(n=50)
    steps[3]["duration_s"] = 0.0
    with pytest.raises(ValueError, match="positive"):
        fit(steps)


def write_log(path, steps, **meta):
    path.write_text("".join(json.dumps({**s, **meta}) + "\n" for s in steps))
    return path


def test_profile_round_trip(tmp_path):
    log = write_log(tmp_path / "steps.jsonl", synthetic_log(n=300), block_size=16, num_blocks=900)
    assert load_step_log(log)[0]["block_size"] == 16
    profile = build_profile(log, "h200", "SmolLM2-135M-Instruct", "bf16", max_batch=64)
    assert (profile.device, profile.block_size, profile.max_batch, profile.num_blocks) == \
        ("cuda:0", 16, 64, 900)
    assert profile.steps == 300 and profile.fit["holdout_steps"] == 60
    save_profile(profile, tmp_path / "p.json")
    loaded = load_profile(tmp_path / "p.json")
    assert loaded == profile
    f = PlanFeatures(2, 600, 200_000, 30, 40_000)
    assert loaded.cost_model().cost(f) == pytest.approx(TRUE.cost(f), rel=0.01)
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["features"] == list(FEATURES) and set(data["coefficients"]) == set(FEATURES)
    assert {"hardware", "model", "dtype", "device", "block_size", "max_batch", "num_blocks",
            "fit", "steps", "date"} <= data.keys()


def test_profiles_load_by_shipped_name_and_unknown_ones_say_what_exists(tmp_path, monkeypatch):
    monkeypatch.setattr(sim.profile, "SHIPPED_DIR", tmp_path / "profiles")
    (tmp_path / "profiles").mkdir()
    log = write_log(tmp_path / "steps.jsonl", synthetic_log(n=100))
    for dtype in ("fp32", "bf16"):
        save_profile(build_profile(log, hardware="cpu", model="m", dtype=dtype, max_batch=8),
                     tmp_path / "profiles" / f"cpu-m-{dtype}.json")
    profile = load_profile("cpu-m-fp32")
    assert (profile.hardware, profile.dtype, profile.max_batch) == ("cpu", "fp32", 8)
    assert load_profile("cpu-m-bf16").dtype == "bf16"
    with pytest.raises(FileNotFoundError, match="cpu-m-bf16, cpu-m-fp32"):
        load_profile("gpu-nothing")


def test_the_shipped_profiles_load_and_carry_what_a_calibration_measures():
    for name in ("cpu-smollm2-135m-fp32", "cpu-smollm2-135m-bf16"):
        profile = load_profile(name)
        assert profile.model == "SmolLM2-135M-Instruct" and name.endswith(profile.dtype)
        assert set(profile.overheads) == {"request_s", "front_s", "wake_s", "delivery_s"}
        assert profile.fitted_ranges and set(profile.fit["by_kind"]) == set(KINDS)


def padded_batch_log():
    """Small decode batches cost what batch 4 costs, as padded matmuls on a CPU do."""
    rng = np.random.default_rng(5)
    steps = []
    for i in range(400):
        batch = int(rng.integers(1, 9))
        f = PlanFeatures(0, 0, 0, batch, batch * 100)
        rows = 1 if batch == 1 else max(batch, 4)
        duration = 0.05 + 0.004 * rows + 1e-6 * f.context_tokens
        steps.append({"step": i + 1, "start_s": 0.0, "duration_s": duration, **f.as_dict()})
    return steps


def test_fit_learns_what_a_decode_batch_costs_beyond_linear():
    """The fit keeps a per-batch correction because it predicts unseen steps better."""
    cost, report = fit(padded_batch_log(), holdout_fraction=0.25, seed=0)
    assert len(cost.batch_excess) == 8
    for batch, expected in [(1, 0.054), (2, 0.066), (3, 0.066), (4, 0.066), (8, 0.082)]:
        f = PlanFeatures(0, 0, 0, batch, batch * 100)
        assert cost.cost(f) == pytest.approx(expected + 1e-4 * batch, rel=1e-3), batch
    assert report.mape < 1e-3


def test_profile_keeps_the_batch_correction(tmp_path):
    log = tmp_path / "steps.jsonl"
    log.write_text("".join(json.dumps(s) + "\n" for s in padded_batch_log()))
    profile = build_profile(log, hardware="h", model="m", dtype="fp32")
    assert len(profile.batch_excess) == 8
    path = tmp_path / "p.json"
    save_profile(profile, path)
    assert load_profile(path).cost_model() == profile.cost_model()



def test_a_batch_correction_is_kept_only_at_sizes_where_it_predicts_the_other_half():
    """Batch 1 sits 10 ms under the line in both halves of the steps: kept. Batch 5
    sits 4 ms over it in the first half only: its correction would mislead the
    second half, so batch 5 stays on the line, whatever batch 1 gains."""
    from sim.fit import _with_batch_excess
    linear = LinearCost(fixed=0.05)
    half_a = [(1, -0.01)] * 4 + [(5, 0.004)] * 3 + [(3, 0.0)] * 3
    half_b = [(1, -0.01)] * 4 + [(5, 0.0)] * 3 + [(5, 0.004)] + [(3, 0.0)] * 2
    rows = half_a + half_b
    steps = [{"num_prefills": 0, "prefill_tokens": 0, "prefill_tokens_sq": 0, "decode_batch": b,
              "context_tokens": 0, "duration_s": 0.05 + r} for b, r in rows]
    cost = _with_batch_excess(linear, steps, np.array([r for _, r in rows]))
    assert cost.batch_excess[0] == pytest.approx(-0.01)
    assert cost.batch_excess[4] == 0.0
    assert cost.cost(PlanFeatures(0, 0, 0, 5, 0)) == pytest.approx(0.05)


def test_a_size_measured_in_one_slow_stretch_gets_no_correction_of_its_own():
    """A shared host runs slow for tens of seconds: batch 4's steps during such a
    stretch, two thirds of them, take 10 ms more; its later steps do not. Halves
    drawn at random would both carry the stretch (a correction of 9 ms); halves in
    time show that it does not hold. Batch 1, 8 ms under the line early and late,
    keeps its correction."""
    rng = np.random.default_rng(2)
    rows = ([(4, 0.01)] * 24 + [(1, -0.008)] * 12 + [(2, 0.0), (3, 0.0), (6, 0.0)] * 40
            + [(1, -0.008)] * 12 + [(4, 0.0)] * 12)
    steps = [{"num_prefills": 0, "prefill_tokens": 0, "prefill_tokens_sq": 0, "decode_batch": b,
              "context_tokens": 50 * b,
              "duration_s": 0.04 + 0.005 * b + r + 1e-4 * rng.standard_normal()} for b, r in rows]
    cost, _ = fit(steps, holdout_fraction=0.1, seed=0)
    assert cost.batch_excess[0] < -0.004
    assert cost.cost(PlanFeatures(0, 0, 0, 1, 50)) == pytest.approx(0.037, abs=1e-3)
    assert cost.batch_excess[3] == 0.0
    assert cost.cost(PlanFeatures(0, 0, 0, 4, 200)) == pytest.approx(0.06, abs=2e-3)


def test_prompt_steps_do_not_move_what_a_decode_costs():
    """Steps with prompts pay a cost the terms do not name (here a per-step one,
    the prompt path's own): the decode terms come from decode-only steps all the
    same, and the prompt terms take up the rest."""
    steps = synthetic_log(n=600, noise=0.0)
    for s in steps:
        if s["num_prefills"]:
            s["duration_s"] += 0.05
    cost, _ = fit(steps, holdout_fraction=0.2, seed=0)
    for name in ("fixed", "decode_batch", "context_tokens"):
        assert getattr(cost, name) == pytest.approx(getattr(TRUE, name), rel=1e-6), name
    assert cost.num_prefills > TRUE.num_prefills


def test_a_slow_stretch_of_the_host_does_not_price_the_prompts_measured_in_it():
    """The host runs 15% slow for the stretch in which every prompt step falls, with
    decode-only steps before, among and after them. Each step's pace read from its
    neighbouring decodes takes the stretch out: the prompt terms come out as true as
    the decode terms, within 2.5% of the truth. A log without the clock to read it
    from prices the prompts 10 to 20% high."""
    pool = synthetic_log(n=3000, noise=0.0)
    decodes = [s for s in pool if not s["num_prefills"]]
    prompts = [s for s in pool if s["num_prefills"]][:200]
    timeline = ([(s, 1.0) for s in decodes[:400]]
                + [(s, 1.15) for pair in zip(prompts, decodes[400:600]) for s in pair]
                + [(s, 1.0) for s in decodes[600:1000]])
    steps, clock = [], 1.7e9
    for step, slow in timeline:
        steps.append(dict(step, duration_s=step["duration_s"] * slow, start_unix=clock))
        clock += step["duration_s"] * slow
    cost, _ = fit(steps, holdout_fraction=0.1, seed=0)
    for name in ("fixed", "decode_batch", "context_tokens", "prefill_tokens", "prefill_tokens_sq",
                 "prefix_tokens"):
        assert getattr(cost, name) == pytest.approx(getattr(TRUE, name), rel=0.025), name
    unclocked, _ = fit([{k: v for k, v in s.items() if k != "start_unix"} for s in steps],
                       holdout_fraction=0.1, seed=0)
    for name in ("prefill_tokens", "prefill_tokens_sq", "prefix_tokens"):
        assert 1.1 < getattr(unclocked, name) / getattr(TRUE, name) < 1.2, name


def test_a_context_token_is_priced_apart_from_the_sizes_that_bend():
    """Odd batch sizes cost 8 ms over the line, and long contexts are read at batch 8
    only, as in a calibration whose long decodes run at the full batch. The context
    price comes from within each size, so a batch-5 step at a context no batch-5
    step had is priced right; one line through all the steps tilts the context
    price to take up batch 8's place under the odd sizes."""
    rng = np.random.default_rng(4)
    true = LinearCost(fixed=0.05, decode_batch=0.004, context_tokens=1e-5, prefill_tokens=0.002)
    steps = [{"num_prefills": 1, "prefill_tokens": n, "prefill_tokens_sq": n * n, "decode_batch": 0,
              "context_tokens": 0, "duration_s": true.cost(PlanFeatures(1, n, n * n, 0, 0))}
             for n in range(32, 640, 32)]
    for rung in range(3):
        for batch in range(1, 9):
            for i in range(12):
                context = batch * (30 + i) + (rng.integers(1000, 3000) if batch == 8 and rung == 2 else 0)
                f = PlanFeatures(0, 0, 0, batch, int(context))
                steps.append({"num_prefills": 0, "prefill_tokens": 0, "prefill_tokens_sq": 0,
                              "decode_batch": batch, "context_tokens": int(context),
                              "duration_s": true.cost(f) + 0.008 * (batch % 2) + 2e-4 * rng.standard_normal()})
    cost, _ = fit(steps, holdout_fraction=0.1, seed=0)
    assert cost.context_tokens == pytest.approx(1e-5, rel=0.05)
    unseen = PlanFeatures(0, 0, 0, 5, 5 * 400)
    assert cost.cost(unseen) == pytest.approx(true.cost(unseen) + 0.008, rel=0.01)


@pytest.mark.parametrize("host", [(0.9, 1.0, 1.0), (1.0, 1.0, 1.1)])
def test_a_size_held_for_a_dozen_steps_is_not_taken_for_the_hosts_pace(host):
    """A calibration climbs its sizes three times, each size for a dozen steps; the
    host runs a tenth fast or slow through one climb. Batch 3 costs 6 ms over the
    line in every climb. Its halves in time disagree over raw seconds, so the raw
    fit keeps no correction for it; were the host's pace read against that fit,
    batch 3's own cost would be read as the host running slow about its steps, and
    priced 8% short."""
    true = LinearCost(fixed=0.05, decode_batch=0.004, context_tokens=1e-5, prefill_tokens=0.002)
    rng = np.random.default_rng(0)
    steps, start = [], 0.0
    for pace in host:
        work = [PlanFeatures(1, n, n * n, 0, 0) for n in range(64, 640, 64)]
        work += [PlanFeatures(0, 0, 0, batch, batch * (30 + i)) for batch in range(1, 9) for i in range(12)]
        for f in work:
            seconds = (true.cost(f) + 0.006 * (f.decode_batch == 3)) * pace * (1 + 0.002 * rng.standard_normal())
            steps.append({**f.as_dict(), "duration_s": seconds, "start_unix": start})
            start += seconds
    cost, _ = fit(steps, holdout_fraction=0.1, seed=0)
    batch_3 = PlanFeatures(0, 0, 0, 3, 3 * 36)
    assert cost.cost(batch_3) == pytest.approx(true.cost(batch_3) + 0.006, rel=0.01)
