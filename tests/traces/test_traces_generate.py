"""Synthetic traces: seeded, at the asked rate and burstiness, with the asked length
distributions and client mix."""
import numpy as np
import pytest

from traces import (ClientMix, Fixed, LeaveHow, LogNormal, ReadMode, Resampled, TraceRequest,
                    Uniform, arrival_times, generate, parse_lengths, write_trace)


def rng(seed=0):
    return np.random.default_rng(seed)


def test_same_seed_same_trace_other_seed_other_trace():
    args = dict(rate=5.0, count=200, cv=2.0, prompt_lengths=LogNormal(100, 0.5),
                output_lengths=Uniform(8, 64), clients=ClientMix(slow=0.2, slow_pause_s=0.1))
    assert generate(**args, seed=7) == generate(**args, seed=7)
    assert generate(**args, seed=7) != generate(**args, seed=8)


def test_requests_are_counts_only_with_ids_in_arrival_order():
    requests = generate(rate=2.0, count=50, seed=1)
    assert [r.id for r in requests] == [str(i) for i in range(50)]
    assert all(r.prompt is None and r.prompt_tokens == 64 and r.max_new_tokens == 64 for r in requests)
    arrivals = [r.arrival_s for r in requests]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert all(round(a, 6) == a for a in arrivals)


@pytest.mark.parametrize("cv", [1.0, 0.5, 3.0])
def test_rate_and_burstiness_over_a_large_sample(cv):
    times = arrival_times(20.0, count=50_000, cv=cv, rng=rng())
    gaps = np.diff(times)
    assert (len(times) - 1) / times[-1] == pytest.approx(20.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_arrivals_over_a_duration():
    times = arrival_times(50.0, duration_s=200.0, rng=rng(3))
    assert times[0] == 0.0 and times.max() < 200.0 and np.all(np.diff(times) >= 0)
    assert len(times) == pytest.approx(50.0 * 200.0, rel=0.03)
    assert len(generate(rate=50.0, duration_s=200.0, seed=3)) == len(times)


@pytest.mark.parametrize("args, problem", [
    (dict(rate=0, count=5), "rate must be positive"),
    (dict(rate=1, count=5, duration_s=2), "exactly one of count and duration_s"),
    (dict(rate=1), "exactly one of count and duration_s"),
    (dict(rate=1, count=5, cv=0), "cv must be positive"),
])
def test_bad_arrival_arguments(args, problem):
    with pytest.raises(ValueError, match=problem):
        arrival_times(**args, rng=rng())


def test_length_distributions():
    assert set(Fixed(64).sample(100, rng()).tolist()) == {64}
    uniform = Uniform(16, 20).sample(5000, rng())
    assert set(uniform.tolist()) == {16, 17, 18, 19, 20}
    lognormal = LogNormal(100, 0.5).sample(20_000, rng())
    assert np.median(lognormal) == pytest.approx(100, rel=0.03)
    assert np.percentile(lognormal, 90) == pytest.approx(100 * np.exp(0.5 * 1.2816), rel=0.05)
    assert LogNormal(1, 2.0).sample(1000, rng()).min() == 1
    assert set(Resampled((3, 9)).sample(200, rng()).tolist()) == {3, 9}
    with pytest.raises(ValueError):
        Uniform(10, 5)
    with pytest.raises(ValueError):
        Fixed(0)


def test_parse_lengths(tmp_path):
    assert parse_lengths("fixed:64", "prompt") == Fixed(64)
    assert parse_lengths("uniform:16:128", "output") == Uniform(16, 128)
    assert parse_lengths("lognormal:100:0.5", "prompt") == LogNormal(100.0, 0.5)
    trace = tmp_path / "t.jsonl"
    write_trace(trace, [TraceRequest("a", 0.0, 10, 3), TraceRequest("b", 1.0, 20, 4)])
    assert parse_lengths(f"trace:{trace}", "prompt") == Resampled((10, 20))
    assert parse_lengths(f"trace:{trace}", "output") == Resampled((3, 4))
    for bad in ["fixed", "fixed:x", "uniform:16", "normal:1:2", "lognormal:100"]:
        with pytest.raises(ValueError, match="is not one of fixed:N"):
            parse_lengths(bad, "prompt")
    with pytest.raises(ValueError, match="1 <= low <= high"):
        parse_lengths("uniform:128:16", "prompt")


def test_client_mix_fractions_are_exact_counts():
    mix = ClientMix(slow=0.2, slow_pause_s=0.25, leave=0.15, leave_after_tokens=12,
                    leave_how=LeaveHow.RST)
    requests = generate(rate=3.0, count=40, clients=mix, seed=2)
    slow = [r.client for r in requests if r.client.slow]
    leavers = [r.client for r in requests if r.client.leaves]
    assert len(slow) == 8 and len(leavers) == 6
    assert all(c.read is ReadMode.PER_EVENT and c.pause_s == 0.25 for c in slow)
    assert all(c.leave_after_tokens == 12 and c.leave_after_s is None and c.leave_how is LeaveHow.RST
               for c in leavers)
    stayers = [r.client for r in requests if not r.client.leaves]
    assert all(c.leave_how is LeaveHow.FIN for c in stayers)


def test_client_mix_byte_rate_readers_and_timed_leavers():
    mix = ClientMix(slow=0.5, slow_bytes_per_s=200.0, leave=1.0, leave_after_s=2.0)
    clients = mix.assign(10, rng())
    assert sum(c.read is ReadMode.BYTE_RATE and c.bytes_per_s == 200.0 for c in clients) == 5
    assert all(c.leave_after_s == 2.0 and c.leave_how is LeaveHow.FIN for c in clients)


@pytest.mark.parametrize("args, problem", [
    (dict(slow=0.2), "exactly one of slow_pause_s and slow_bytes_per_s"),
    (dict(slow=0.2, slow_pause_s=0.1, slow_bytes_per_s=10), "exactly one of"),
    (dict(slow_pause_s=0.1), "the slow fraction is 0"),
    (dict(slow=0.1, slow_pause_s=-1), "must be positive"),
    (dict(leave=0.1), "leave_after_tokens or leave_after_s"),
    (dict(leave_how=LeaveHow.RST), "the leave fraction is 0"),
    (dict(leave=1.5, leave_after_s=1), "leave must be a fraction in [0, 1]"),
])
def test_client_mix_refuses_settings_that_cannot_apply(args, problem):
    with pytest.raises(ValueError) as caught:
        ClientMix(**args)
    assert problem in str(caught.value)
