"""Calibrate and compare against a server that is already running (`--url`): none
is started, the settings and the step records come from the server over HTTP, and
the server is left running with a whole pool."""
import json
import math
import os
import subprocess
import sys
import time

import httpx
import pytest

import live.server.engine_info
import live.engine.step_log
from analysis.calibrate import WARMUP, calibrate
from analysis.hardware import profile_name
from analysis.live_target import LiveTarget
from analysis.price_check import NEW_TOKENS
from analysis.report import ROWS
from analysis.workloads import calibration_workload
from live.engine.step_log import StepLog
from scheduler.settings import ServeSettings
from sim import load_profile, pace
from sim.profile import CPU_SMOLLM2
from traces import write_trace
from traces.outcome import read_outcomes

from analysis_helpers import mixed_trace, save_tiny_llama
from live_server import ServerThread, running_server, stats, tiny_app, wait_idle

CONTEXT = 256
"""The tiny Llama's context: longer requests are refused."""


@pytest.fixture(scope="module")
def server(tmp_path_factory, smollm2):
    model_dir = save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2.tokenizer)
    settings = ServeSettings(model=str(model_dir), max_batch=4, num_blocks=128, block_size=16)
    with ServerThread(settings) as running:
        yield running


def last_step(url: str) -> int:
    return httpx.get(url + "/v1/engine").json()["steps"]["last"]


def server_steps(url: str, after: int) -> list[dict]:
    body = httpx.get(url + "/v1/steps", params={"after": after}).text
    return [json.loads(line) for line in body.splitlines()]


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_whole(running: ServerThread) -> None:
    url = running.base_url
    assert httpx.get(url + "/health").json()["status"] == "ok"
    idle = wait_idle(url)
    assert idle["blocks_free"] == idle["num_blocks"] == 128
    engine = running.server.service.engine.engine
    assert engine.core.is_drained() and engine.core.pool.reserved_blocks == 0


def run_analysis(*args, cache) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "TWINSTEP_CACHE": str(cache)})


def test_calibrate_then_compare_against_a_running_server(server, tmp_path, monkeypatch):
    url = server.base_url
    cache = tmp_path / "cache"
    monkeypatch.setenv("TWINSTEP_CACHE", str(cache))
    info = httpx.get(url + "/v1/engine").json()

    before = last_step(url)
    workload = calibration_workload(4, mixed_count=6, time_scale=0.1, max_model_len=256)
    profile, path = calibrate(url, tmp_path / "cal", workload=workload, log=lambda *a: None)
    run = server_steps(url, before)
    fitted = read_jsonl(tmp_path / "cal" / "calibration-steps.jsonl")
    # the warmup's steps come first and are left out of the fit; then every step of
    # the workload, as the server recorded it
    warmup, rest = run[:len(run) - len(fitted)], run[len(run) - len(fitted):]
    assert fitted == rest and profile.steps == len(fitted) > 0
    assert sum(s["num_prefills"] for s in warmup) == len(WARMUP)
    fits = [r for phase in workload for r in phase if r.prompt_tokens + r.max_new_tokens <= CONTEXT]
    assert sum(s["num_prefills"] for s in fitted) == len(fits)
    saved = json.loads(path.read_text())
    assert (saved["model"], saved["hardware"], saved["max_batch"]) == (
        info["model"], info["hardware"], 4)
    cached = cache / "profiles" / f"{profile_name(info['hardware'], info['model'], 'float32')}.json"
    assert json.loads(cached.read_text()) == saved
    assert_whole(server)

    trace = mixed_trace()
    write_trace(tmp_path / "trace.jsonl", trace)
    before = last_step(url)
    out = run_analysis("compare", "--url", url, "--max-batch", "4", "--policy", "pause_then_drop",
                       "--trace", str(tmp_path / "trace.jsonl"), "--out", str(tmp_path / "cmp"),
                       cache=cache)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"using the profile measured earlier on this hardware: {cached}" in out.stdout
    live_steps = read_jsonl(tmp_path / "cmp" / "live-steps.jsonl")
    assert live_steps == server_steps(url, before) and live_steps
    assert sum(s["num_prefills"] for s in live_steps) == len(trace)
    figures = json.loads((tmp_path / "cmp" / "figures.json").read_text())
    assert list(figures) == list(ROWS)
    for name, f in figures.items():
        assert math.isfinite(f["live"]) and math.isfinite(f["sim"]), name
    assert figures["completed"]["live"] == figures["completed"]["sim"] == 8
    outcomes = read_outcomes(tmp_path / "cmp" / "live-outcomes.parquet")
    assert sorted(o.id for o in outcomes) == sorted(r.id for r in trace)
    assert_whole(server)


def test_a_server_with_keys_is_calibrated_and_compared_with_them(tmp_path, smollm2):
    """The key flags say how to reach a running server, not what it runs: the
    records come with the admin key, the requests with the client keys."""
    model_dir = save_tiny_llama(tmp_path / "tiny-llama", smollm2.tokenizer)
    (tmp_path / "keys").write_text("team:team-secret\n")
    settings = ServeSettings(model=str(model_dir), max_batch=4, num_blocks=128, block_size=16,
                             api_keys_file=str(tmp_path / "keys"), admin_key="admin-secret")
    with ServerThread(settings) as running:
        url = running.base_url
        keys = ["--api-keys-file", str(tmp_path / "keys"), "--admin-key", "admin-secret"]
        trace = mixed_trace()
        write_trace(tmp_path / "trace.jsonl", trace)
        refused = run_analysis("compare", "--url", url, "--trace", str(tmp_path / "trace.jsonl"),
                               "--out", str(tmp_path / "none"), cache=tmp_path / "cache")
        assert refused.returncode == 2 and "401 Unauthorized" in refused.stderr
        assert "give --admin-key" in refused.stderr
        out = run_analysis("calibrate", "--url", url, *keys, "--calibration-time-scale", "0.1",
                           "--out", str(tmp_path / "cal"), cache=tmp_path / "cache")
        assert out.returncode == 0, out.stderr[-3000:]
        out = run_analysis("compare", "--url", url, *keys, "--max-batch", "4",
                           "--trace", str(tmp_path / "trace.jsonl"), "--out", str(tmp_path / "cmp"),
                           cache=tmp_path / "cache")
        assert out.returncode == 0, out.stderr[-3000:]
        figures = json.loads((tmp_path / "cmp" / "figures.json").read_text())
        assert figures["completed"]["live"] == figures["completed"]["sim"] == 8
        admin = {"x-api-key": "admin-secret"}
        records = [json.loads(line) for line in
                   httpx.get(url + "/v1/requests", headers=admin).text.splitlines()]
        assert records and {r["key"] for r in records} == {"team"}
        idle = wait_idle(url, admin)
        assert idle["blocks_free"] == idle["num_blocks"] == 128


def test_the_price_check_reads_the_host_pace_against_a_profile(server, tmp_path):
    url = server.base_url
    before, finished = last_step(url), httpx.get(url + "/v1/engine").json()["requests"]["last"]
    missing = run_analysis("price-check", "--url", url, cache=tmp_path / "empty")
    assert missing.returncode == 2 and "no profile measured on this hardware" in missing.stderr
    assert last_step(url) == before  # nothing ran
    result = run_analysis("price-check", "--url", url, "--profile", CPU_SMOLLM2, "--checks", "3",
                          cache=tmp_path / "empty")
    assert result.returncode == 0, result.stderr
    printed = result.stdout.split("checks: ")[1].splitlines()[0].split(", ")
    checks = [float(p) for p in printed]
    assert len(checks) == 3 and all(p > 0 for p in checks)
    median = sorted(printed, key=float)[1]
    assert f"The host runs at {median} times" in result.stdout
    assert f"python -m sim replay TRACE --profile P --pace {median}" in result.stdout
    # the pace of the checks' steps together lies between the checks' own
    both = pace(server_steps(url, before), load_profile(CPU_SMOLLM2).cost_model())
    assert min(checks) - 0.0005 <= both <= max(checks) + 0.0005
    # three checks of eight requests, each to its last token, and the pool whole again
    body = httpx.get(url + "/v1/requests", params={"after": finished}).text
    records = [json.loads(line) for line in body.splitlines()]
    assert len(records) == 24 and all(r["id"].startswith("price-check-") for r in records)
    assert {r["completion_tokens"] for r in records} == {NEW_TOKENS}
    assert_whole(server)


def test_serve_flags_the_server_does_not_run_are_refused(server, tmp_path):
    url = server.base_url
    before, served = last_step(url), stats(url)["finished"]
    out = run_analysis("compare", "--url", url, "--max-batch", "8", "--policy", "pause",
                       "--block-size", "16", "--eager", "--max-prefill-tokens", "64",
                       "--out", str(tmp_path / "cmp"), cache=tmp_path)
    assert out.returncode == 2
    assert "--max-batch 8 (the server runs 4)" in out.stderr
    assert "--policy pause (the server runs pause_then_drop)" in out.stderr
    assert "--eager True (the server runs False)" in out.stderr
    assert "--max-prefill-tokens 64 (the server runs None)" in out.stderr
    assert "--block-size" not in out.stderr
    assert last_step(url) == before and stats(url)["finished"] == served
    assert not (tmp_path / "cmp").exists()


class SkewedClock:
    """The `time` module of a host whose clock runs `ahead_s` ahead."""

    def __init__(self, ahead_s: float):
        self.ahead_s = ahead_s

    def time(self) -> float:
        return time.time() + self.ahead_s


def test_steps_of_a_server_with_another_clock_come_onto_this_one(monkeypatch):
    for module in (live.server.engine_info, live.engine.step_log):
        monkeypatch.setattr(module, "time", SkewedClock(100.0))
    app, _ = tiny_app()
    with running_server(app) as url:
        sent = time.time()
        httpx.post(url + "/v1/stream", json={"prompt": "what time is it", "max_new_tokens": 4})
        wait_idle(url)
        done = time.time()
        with LiveTarget(url) as target:
            assert target.clock_offset_s == pytest.approx(100.0, abs=0.5)
            records = target.steps_after(0)
        raw = server_steps(url, 0)
    assert [r["step"] for r in records] == [r["step"] for r in raw] and len(records) == 4
    assert all(sent + 99 < r["start_unix"] < done + 101 for r in raw)
    assert all(sent - 1 < r["start_unix"] < done + 1 for r in records)


def test_a_run_whose_steps_left_the_ring_is_an_error_that_says_so():
    app, engine = tiny_app()
    engine.step_log = StepLog(ring_size=3)
    with running_server(app) as url, LiveTarget(url) as target:
        httpx.post(url + "/v1/stream", json={"prompt": "many steps", "max_new_tokens": 8})
        wait_idle(url)
        with pytest.raises(RuntimeError, match="steps 1 to 5 fell out of the ring of the last 3"):
            target.steps_after(0)
        assert [r["step"] for r in target.steps_after(5)] == [6, 7, 8]
