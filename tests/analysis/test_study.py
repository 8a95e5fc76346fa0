"""The studies on a tiny random model: each writes a table, a figure and JSON
holding every quantity it measured, live beside simulated, and the live side
measures what the workload asked for."""
import json
import subprocess
import sys

import pytest

from analysis.__main__ import main as analysis_main
from analysis.study import proxy
from analysis.study.bench import NOT_MODELLED, Bench, Findings, Quantity, write_study
from analysis.study.disconnect import DisconnectSize, run as disconnect
from analysis.study.hol import HolSize, run as hol
from analysis.study.overlap import OverlapSize, run as overlap
from analysis.study.slow_reader import SlowReaderSize, run as slow_reader
from scheduler.settings import ServeSettings
from sim import Profile, save_profile
from sim.cost_model import FEATURES
from traces.outcome import read_outcomes

from analysis_helpers import save_tiny_llama

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, smollm2):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2.tokenizer)


def bench(model_dir, out) -> Bench:
    coefficients = {**dict.fromkeys(FEATURES, 0.0), "fixed": 0.004, "decode_batch": 0.0005,
                    "prefill_tokens": 0.0001}
    profile = Profile("test machine", "tiny", "fp32", coefficients=coefficients, fit={},
                      steps=0, date="2026-01-01", max_batch=4, overheads={"request_s": 0.001})
    settings = ServeSettings(model=str(model_dir), threads=1, num_blocks=256)
    return Bench(settings, profile, out, log=lambda *a: None)


def written(out) -> tuple[dict, str]:
    assert (out / "study.png").read_bytes()[:8] == PNG
    return json.loads((out / "study.json").read_text()), (out / "study.md").read_text()


def test_the_writer_keeps_every_quantity_in_table_and_json(tmp_path):
    quantities = [Quantity("tokens/s", 10.0, 12.0, "14×"), Quantity("gap (ms)", 0.0, 3.0),
                  Quantity("interleaved", 1.0, NOT_MODELLED), Quantity("unmeasured", None, 2.0)]
    findings = Findings("A study", "what ran", quantities, draw=lambda fig: fig.subplots().plot([1, 2]),
                        notes=["padded events"])
    write_study("example", findings, tmp_path, 12.3)
    data, md = written(tmp_path)
    assert list(data["quantities"]) == [q.name for q in quantities]
    assert data["quantities"]["tokens/s"] == {"name": "tokens/s", "live": 10.0, "sim": 12.0,
                                              "reference": "14×", "error": pytest.approx(0.2)}
    assert [data["quantities"][n]["error"] for n in ("gap (ms)", "interleaved", "unmeasured")] == [None] * 3
    assert "| tokens/s | 10 | 12 | +20% | 14× |" in md
    assert "| interleaved | 1 | not modelled | - |  |" in md
    assert "* padded events" in md and data["runtime_s"] == 12.3


def test_overlap_measures_every_level_on_both_sides(model_dir, tmp_path):
    size = OverlapSize(levels=(1, 3), tokens=5, running=(2,), running_tokens=24, joiners=3,
                       joiner_tokens=2, joiner_first_s=0.05, joiner_every_s=0.05,
                       pass_tokens=16)
    findings = overlap(bench(model_dir, tmp_path), size)
    write_study("overlap", findings, tmp_path, 1.0)
    data, md = written(tmp_path)
    names = [q.name for q in findings.quantities]
    assert names == list(data["quantities"])
    for level in ("1 stream", "3 streams"):
        for what in ("tokens/s", "TTFT p50 (ms)", "TTFT p99 (ms)", "inter-token gap p50 (ms)"):
            assert f"{level}: {what}" in names
    assert "3 streams: throughput / 1 stream's" in names
    # the most streams again, their prompts in passes of one prompt each
    passes = [n for n in names if "first tokens by pass" in n]
    assert passes == [f"3 streams, first tokens by pass of 16 prompt tokens: {what}"
                      for what in ("TTFT p50 (ms)", "TTFT p99 (ms)", "tokens/s")]
    assert [n for n in names if n.startswith("joiners")] == [
        "joiners' TTFT p50 (ms), idle server", "joiners' TTFT p50 (ms), 2 streams running"]
    for q in findings.quantities:
        assert q.live is not None and q.live > 0 and q.sim is not None and q.sim > 0, q
        assert f"| {q.name} |" in md
    # every stream of every run read what the trace asked, live and simulated
    for run_dir in ("streams-1", "streams-3", "streams-3-passes", "joiners-0", "joiners-2"):
        for side in ("live", "sim"):
            outcomes = read_outcomes(tmp_path / run_dir / f"{side}-outcomes.parquet")
            assert outcomes and all(o.tokens_read == o.max_new_tokens for o in outcomes)


def test_disconnect_leaks_nothing_and_counts_the_leavers(model_dir, tmp_path):
    size = DisconnectSize(streams=8, tokens=20, arrivals_s=0.2, leave_after=(2, 4))
    figures = {q.name: q for q in disconnect(bench(model_dir, tmp_path), size).quantities}
    for label in ("listening", "write-only"):
        assert (figures[f"{label}: leavers"].live, figures[f"{label}: leavers"].sim) == (4, 4)
        read_to_end = figures[f"{label}: streams read to their end"]
        assert (read_to_end.live, read_to_end.sim) == (4, 4)
        assert (figures[f"{label}: blocks leaked"].live, figures[f"{label}: blocks leaked"].sim) == (0, 0)
        for side in ("live", "sim"):
            made_per_read = getattr(figures[f"{label}: leavers' tokens made per token read"], side)
            assert 1 <= made_per_read <= 20 / 2
            for how in ("FIN", "RST"):
                # every leaver's sequence was released, and after its close
                assert getattr(figures[f"{label}: close to release p50, {how} (ms)"], side) >= 0
        assert figures[f"{label}: events dropped after close"].live >= 0
    # a server that never listens learns from the write of a token made after the
    # close: each of the 4 leavers costs at least one token made for nobody
    made = {label: figures[f"{label}: leavers' tokens made per token read"].sim
            for label in ("listening", "write-only")}
    assert made["write-only"] > made["listening"]
    assert "write-only: tokens made after their client left" not in figures
    assert figures["listening: disconnect noticed by the server p50 (ms)"].live >= 0
    assert "write-only: disconnect noticed by the server p50 (ms)" not in figures


def test_a_slow_reader_under_unbounded_reads_everything_and_holds_its_slot(model_dir, tmp_path):
    size = SlowReaderSize(streams=3, tokens=6, pause_s=0.05, event_padding=0)
    findings = slow_reader(bench(model_dir, tmp_path), size, policies=("unbounded",))
    figures = {q.name: q for q in findings.quantities}
    assert list(figures) == [
        "no slow reader: streams finish (s)", "no slow reader: gap p99 (ms)",
        *(f"unbounded: {what}" for what in (
            "healthy streams finish (s)", "healthy gap p99 (ms)",
            "slow stream's slot and blocks held (s)", "peak events queued for it",
            "peak bytes queued for it (MB)", "slow_client ends the reader's stream at (s)",
            "the slow reader's tokens"))]
    tokens = figures["unbounded: the slow reader's tokens"]
    assert (tokens.live, tokens.sim) == (6, 6)
    told = figures["unbounded: slow_client ends the reader's stream at (s)"]
    assert (told.live, told.sim) == (None, None)
    held = figures["unbounded: slow stream's slot and blocks held (s)"]
    assert held.live > 0 and held.sim > 0
    assert "unbounded: the slow reader's stream ended length after 6 tokens" in findings.notes[-1]


def test_one_http1_connection_makes_the_short_requests_wait_for_the_long_one(model_dir, tmp_path):
    findings = hol(bench(model_dir, tmp_path), HolSize(long_tokens=40, short=3, short_tokens=3))
    figures = {q.name: q for q in findings.quantities}
    one = "one HTTP/1.1 connection"
    for side in ("live", "sim"):
        # nothing of a short request comes before the long stream has ended
        assert (getattr(figures[f"{one}: short requests' first token p50 (ms)"], side)
                > getattr(figures[f"{one}: the long stream ends (ms)"], side))
    assert figures["one HTTP/2 connection: short requests' first token p50 (ms)"].live > 0
    assert all(q.sim == NOT_MODELLED for name, q in figures.items() if "HTTP/2" in name)


def test_fill_is_refused_for_a_study_without_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "analysis", "study", "overlap", "--fill",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--fill is a variant of slow-reader only" in out.stderr
    assert not any(tmp_path.iterdir())


def test_without_nginx_the_proxy_study_says_it_skips_and_exits_0(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(proxy.shutil, "which", lambda name: None)
    save_profile(bench(tmp_path, tmp_path).profile, tmp_path / "profile.json")
    code = analysis_main(["study", "proxy", "--profile", str(tmp_path / "profile.json"),
                          "--out", str(tmp_path / "proxy")])
    assert code == 0
    assert "proxy: skipped: nginx is not installed" in capsys.readouterr().out
    assert not (tmp_path / "proxy").exists()
