"""The whole twin pipeline on a tiny random model: serve it for real, calibrate,
replay one trace live and simulated, and write a report that holds every figure
for both sides with errors computed from them."""
import json
import math
import subprocess
import sys

import pytest

from analysis.__main__ import main as analysis_main
from analysis.calibrate import calibrate
from analysis.compare import compare
from analysis.plots import write_plots
from analysis.report import ROWS, rows, write_report
from analysis.workloads import CHUNK_BUDGETS, calibration_workload, chunk_workload
from scheduler.settings import ServeSettings
from sim import load_profile, load_step_log, pace
from traces import TraceRequest, write_trace

from analysis_helpers import mixed_trace, save_tiny_llama


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, smollm2):
    """A tiny random Llama with the embedded model's tokenizer, as a HF directory."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2.tokenizer)


def test_calibrate_compare_and_report(model_dir, tmp_path):
    settings = ServeSettings(model=str(model_dir), threads=1, max_batch=4, num_blocks=128)
    workload = calibration_workload(4, mixed_count=12, time_scale=0.2, max_model_len=256)
    profile, path = calibrate(settings, tmp_path / "cal", workload=workload, log=lambda *a: None)
    saved = json.loads(path.read_text())
    assert saved["steps"] > 20 and saved["max_batch"] == 4
    overheads = saved["overheads"]
    assert set(overheads) == {"request_s", "front_s", "wake_s", "delivery_s"}
    # sixteen requests sent at once reach the server one after another, and a
    # request the idle engine hears of starts its step a moment later
    assert overheads["front_s"] > 0 and overheads["wake_s"] > 0
    assert 0 < overheads["request_s"] < 0.1 and 0 < overheads["delivery_s"] < 0.1
    assert 0 <= saved["fit"]["mape"] < 10

    requests = mixed_trace()
    comparison = compare(requests, profile, settings, tmp_path / "cmp", log=lambda *a: None)
    for side in (comparison.live, comparison.sim):
        by_id = {o.id: o for o in side.outcomes}
        assert set(by_id) == {r.id for r in requests}
        for r in requests:
            o = by_id[r.id]
            if r.client.leaves:
                assert o.left_s is not None and o.tokens_read == 5
            else:
                assert o.finish_reason == "length" and o.tokens_read == r.max_new_tokens
                assert o.first_token_client_s >= o.arrival_s
    assert comparison.leavers == 2
    assert comparison.live.summary.completed == comparison.sim.summary.completed == 8
    # the live side, the client's records with the engine's view of each request:
    # what the server made for every request, and after its client left
    live = {o.id: o for o in comparison.live.outcomes}
    for r in requests:
        o = live[r.id]
        assert o.arrival_s <= o.admitted_s <= o.first_token_engine_s <= o.first_token_client_s
        if r.client.leaves:
            assert o.tokens_read <= o.tokens_generated <= r.max_new_tokens
            assert o.tokens_generated - o.tokens_read >= o.tokens_after_leave >= 0
        else:
            assert (o.tokens_generated, o.tokens_after_leave) == (r.max_new_tokens, 0)
    assert sum(o.tokens_after_leave for o in live.values()) == comparison.live.summary.wasted_tokens

    table = rows(comparison)
    plots = write_plots(comparison, tmp_path / "cmp")
    report = write_report(comparison, table, tmp_path / "cmp", "tiny", plots)
    figures = json.loads((tmp_path / "cmp" / "figures.json").read_text())
    assert list(figures) == list(ROWS)
    for name, f in figures.items():
        assert math.isfinite(f["live"]) and math.isfinite(f["sim"]), name
        if name == "wasted_tokens":
            assert f["error"] == f["sim"] - f["live"] and f["bound"] == 2
        elif f["live"]:
            assert f["error"] == pytest.approx((f["sim"] - f["live"]) / f["live"]), name
        else:
            assert f["error"] == (0.0 if f["sim"] == 0 else None), name
    text = report.read_text()
    assert all(f"| {name} |" in text for name in ROWS)
    for png in plots:
        assert (tmp_path / "cmp" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_command_prints_the_table(model_dir, tmp_path):
    settings = ServeSettings(model=str(model_dir), threads=1, max_batch=4, num_blocks=128)
    _, profile = calibrate(settings, tmp_path / "cal", log=lambda *a: None,
                           workload=calibration_workload(4, mixed_count=6, time_scale=0.1, max_model_len=256))
    write_trace(tmp_path / "trace.jsonl", mixed_trace())
    out = subprocess.run(
        [sys.executable, "-m", "analysis", "compare", "--model", str(model_dir), "--threads", "1",
         "--max-batch", "4", "--num-blocks", "128", "--trace", str(tmp_path / "trace.jsonl"),
         "--profile", str(profile), "--out", str(tmp_path / "cli")],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ttft_client_p50_s" in out.stdout and "makespan_s" in out.stdout
    assert f"report: {tmp_path / 'cli' / 'report.md'}" in out.stdout
    assert (tmp_path / "cli" / "live-outcomes.parquet").exists()
    # the host's pace: the replay's step seconds over the profile's price of those steps
    steps = load_step_log(tmp_path / "cli" / "live-steps.jsonl")
    paced = pace(steps, load_profile(profile).cost_model())
    line = f"The live replay's steps took {paced:.3f} times the profile's price of the same steps"
    assert line in out.stdout and line in (tmp_path / "cli" / "report.md").read_text()


@pytest.mark.parametrize("chunking", [False, True], ids=["whole-prefill", "chunked"])
def test_the_calibration_fits_chunks_that_read_their_prompt_back(model_dir, tmp_path, chunking):
    """Chunks are calibrated at each of the budgets, beside decodes: on the server
    itself at its own budget, on a server like it for each other."""
    budget = {"max_prefill_tokens": 64, "chunked_prefill": True} if chunking else {}
    settings = ServeSettings(model=str(model_dir), threads=1, max_batch=4, num_blocks=128, **budget)
    workload = calibration_workload(4, mixed_count=6, time_scale=0.1, max_model_len=256)
    # the long prompts come within milliseconds of the decoders: a tiny model's 64
    # decode steps then outlast every chunk, however fast the machine steps
    chunks = chunk_workload(4, time_scale=0.01, max_model_len=256)
    assert {r.prompt_tokens for r in chunks if r.id.startswith("chunk-prompt")} == {248}
    profile, _ = calibrate(settings, tmp_path / "cal", log=lambda *a: None, workload=workload,
                           chunks=chunks)
    steps = load_step_log(tmp_path / "cal" / "calibration-steps.jsonl")
    assert CHUNK_BUDGETS == (128, 64)
    assert (tmp_path / "cal" / "calibration-chunks-128-server.log").exists()
    assert (tmp_path / "cal" / "calibration-chunks-64-server.log").exists() is not chunking
    # every prompt of the workload prefilled once, and of the chunks once a budget
    assert sum(s["prefill_tokens"] for s in steps) == sum(
        r.prompt_tokens for phase in [*workload, chunks, chunks] for r in phase)
    continued = [s for s in steps if s["prefix_tokens"]]
    assert continued and all(s["chunked"] for s in continued)
    # a prompt of 248 tokens goes on at 64 a step over a prefix of 64, and with its last
    # 120 over a prefix of 128 (the next prompt's first 8 beside them if it has come)
    assert any(s["prefix_tokens"] == 64 and s["prefill_tokens"] == 64 for s in continued)
    assert any(s["prefix_tokens"] == 128 and s["prefill_tokens"] in (120, 128) for s in continued)
    assert max(s["prefill_tokens"] for s in continued) <= 128
    assert any(s["decode_batch"] for s in continued)  # beside the decodes
    assert profile.fitted_ranges["prefix_tokens"] == max(s["prefix_tokens"] for s in steps) >= 128


def test_a_chunking_server_is_mirrored_and_its_tokens_counted_on_both_sides(model_dir, tmp_path):
    settings = ServeSettings(model=str(model_dir), threads=1, max_batch=4, num_blocks=128,
                             max_prefill_tokens=8, chunked_prefill=True)
    profile, _ = calibrate(settings, tmp_path / "cal", log=lambda *a: None,
                           workload=calibration_workload(4, mixed_count=6, time_scale=0.1,
                                                         max_model_len=256))
    requests = mixed_trace()  # prompts of 8 to 53 tokens: all but the first in chunks
    comparison = compare(requests, profile, settings, tmp_path / "cmp", log=lambda *a: None)
    assert comparison.server.sim_settings()["chunked_prefill"] is True
    for side in (comparison.live, comparison.sim):
        # the engine's count over the run, from its steps, is what the requests made
        assert side.summary.tokens_generated == sum(o.tokens_generated for o in side.outcomes)
        for r, o in zip(requests, sorted(side.outcomes, key=lambda o: int(o.id[1:]))):
            if r.prompt_tokens > 8:  # admitted at its first chunk, before its first token
                assert o.admitted_s < o.first_token_engine_s, (r.id, o)


@pytest.mark.parametrize("scale", ["0", "-1"])
def test_a_calibration_time_scale_that_is_not_positive_is_refused_before_anything_runs(scale, capsys):
    with pytest.raises(SystemExit) as exit_:
        analysis_main(["calibrate", "--calibration-time-scale", scale])
    assert exit_.value.code == 2
    assert "must be above 0" in capsys.readouterr().err


def test_a_workload_without_solo_requests_or_a_burst_leaves_their_overheads_out_and_says_so(
        model_dir, tmp_path):
    settings = ServeSettings(model=str(model_dir), threads=1, max_batch=4, num_blocks=128)
    workload = [[TraceRequest(f"r{i}", 0.3 * i, 16 + 8 * i, 12) for i in range(8)]]
    said = []
    profile, path = calibrate(settings, tmp_path / "cal", workload=workload, log=said.append)
    assert set(json.loads(path.read_text())["overheads"]) == set(profile.overheads) == {"delivery_s"}
    assert any("measured no request_s, front_s, wake_s" in line for line in said)
    assert profile.overheads_model().request_s == profile.overheads_model().wake_s == 0
