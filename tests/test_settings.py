"""One vocabulary of serve settings: the server, the simulator and the analysis
take the same flags with the same defaults (as a user sees them, in --help), the
scheduling defaults are the core's, settings go to `python -m live serve` flags and
back unchanged, and a combination that cannot be is refused by every command
alike, in one line, before anything starts."""
import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from analysis.__main__ import parser as analysis_parser
from live.__main__ import parser as live_parser
from scheduler import SchedulerConfig
from scheduler.flags import as_argv, flag, given
from scheduler.settings import SERVER, SHARED, ServeSettings, scoped
from sim.__main__ import parser as sim_parser
from traces import SAMPLES_DIR

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(SAMPLES_DIR / "mixed.jsonl")
COMMANDS = {"live": ("serve",), "sim": ("replay", TRACE, "--constant-cost", "1"),
            "analysis": ("compare",)}
"""Each command that takes serve settings, with what it needs besides them."""
SETTINGS = {flag(f.name) for f in fields(ServeSettings)}
TRACE_LOADING = {"--model"}
"""The simulator's flags of the same name that load a trace (BurstGPT's model filter)."""


def run(package: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", package, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def help_defaults(package: str, command: str) -> dict[str, str]:
    """Each flag of `python -m PACKAGE COMMAND --help` with the default its help shows."""
    out = run(package, command, "--help")
    assert out.returncode == 0, out.stderr
    defaults = {}
    for entry in re.split(r"\n  (?=--)", out.stdout)[1:]:
        text = " ".join(entry.split("\n\n")[0].split())  # up to the next group's title
        shown = re.search(r"\(default: ([^)]*)\)$", text)
        defaults[text.split()[0]] = shown.group(1) if shown else None
    return defaults


def test_every_setting_the_commands_share_shows_the_same_default():
    seen = {package: help_defaults(package, args[0]) for package, args in COMMANDS.items()}
    seen["sim"] = {name: shown for name, shown in seen["sim"].items() if name not in TRACE_LOADING}
    live = seen["live"]
    assert SETTINGS <= set(live)
    assert set(seen["sim"]) & SETTINGS == {flag(name) for name in scoped(SHARED)}
    assert set(seen["analysis"]) & SETTINGS == {flag(name) for name in scoped(SHARED, SERVER)}
    for package, defaults in seen.items():
        for name in SETTINGS & set(defaults):
            assert defaults[name] == live[name] is not None, (package, name)
    assert [live[f] for f in ("--max-batch", "--max-waiting", "--block-size", "--policy",
                              "--num-blocks", "--threads")] == [
        "16", "256", "16", "pause_then_drop", "none", "none"]


def test_the_parsers_defaults_are_the_settings():
    serve = live_parser().parse_args(["serve"])
    assert ServeSettings(**given(serve, ServeSettings)) == ServeSettings()
    replay = sim_parser().parse_args(["replay", TRACE])
    assert given(replay, ServeSettings, scoped(SHARED)) == {
        name: getattr(ServeSettings(), name) for name in scoped(SHARED)}
    # with --url only the flags given are checked against the server: none is set unless given
    assert given(analysis_parser().parse_args(["compare"]), ServeSettings) == {}
    assert given(analysis_parser().parse_args(["compare", "--max-batch", "4"]),
                 ServeSettings) == {"max_batch": 4}


def test_the_scheduling_defaults_are_the_cores():
    assert ServeSettings().scheduler_config(num_blocks=7) == SchedulerConfig(num_blocks=7)


def test_torch_threads_leave_a_core_unless_told(monkeypatch):
    assert ServeSettings(threads=3).torch_threads() == 3
    for cores, threads in ((8, 7), (2, 1), (1, 1)):
        monkeypatch.setattr(os, "cpu_count", lambda: cores)
        assert ServeSettings().torch_threads() == threads


@pytest.mark.parametrize("settings", [
    ServeSettings(),
    ServeSettings(threads=1, max_batch=4, num_blocks=128, model="/models/tiny"),
    ServeSettings(max_prefill_tokens=64, chunked_prefill=True, admission="optimistic",
                  policy="pause", max_queued=8, stall_timeout_s=2.5),
    ServeSettings(device="cuda", dtype="bfloat16", gpu_memory_fraction=0.5, eager=True),
])
def test_settings_go_to_serve_flags_and_back(settings):
    argv = as_argv(settings)
    assert ServeSettings(**given(live_parser().parse_args(["serve", *argv]), ServeSettings)) == settings


def test_only_what_differs_from_the_servers_defaults_is_passed():
    assert as_argv(ServeSettings()) == []
    assert as_argv(ServeSettings(max_prefill_tokens=64, chunked_prefill=True)) == [
        "--max-prefill-tokens", "64", "--chunked-prefill"]
    on_cuda = as_argv(ServeSettings(device="cuda", gpu_memory_fraction=0.5, eager=True))
    assert on_cuda == ["--device", "cuda", "--gpu-memory-fraction", "0.5", "--eager"]


@pytest.mark.parametrize("settings, message", [
    (dict(gpu_memory_fraction=0.5), "sizes the KV pool of a CUDA device; the device is cpu"),
    (dict(device="cuda", gpu_memory_fraction=0.5, num_blocks=1024), "not both"),
    (dict(device="cuda", gpu_memory_fraction=1.5), r"gpu_memory_fraction must be in \(0, 1\]"),
    (dict(admission="lazy"), "unknown admission policy 'lazy'; known: optimistic, reserve"),
    (dict(chunked_prefill=True), "chunked prefill needs max_prefill_tokens"),
    (dict(policy="bogus"), "unknown backlog policy 'bogus'"),
    (dict(resume_grace_s=-1.0), "resume_grace_s and event_padding must not be negative"),
    (dict(max_batch=0), "max_batch must be at least 1"),
    (dict(threads=0), "threads must be at least 1"),
])
def test_settings_that_cannot_go_together_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        ServeSettings(**settings)


@pytest.mark.parametrize("flags, message", [
    (["--chunked-prefill"], "chunked prefill needs max_prefill_tokens, the chunk budget of a step"),
    (["--admission", "lazy"], "argument --admission: invalid choice: 'lazy'"),
    (["--resume-grace-s", "-1"], "resume_grace_s and event_padding must not be negative"),
])
def test_each_command_refuses_them_in_one_line_before_starting(flags, message, tmp_path):
    for package, args in COMMANDS.items():
        out_dir = tmp_path / package
        writes = [] if package == "live" else ["--out", str(out_dir)]
        out = run(package, *args, *flags, *writes)
        assert out.returncode == 2, (package, out.stderr)
        assert out.stderr.startswith(f"python -m {package} {args[0]}: "), out.stderr
        assert message in out.stderr and out.stderr.count("\n") == 1, out.stderr
        assert out.stdout == "" and not out_dir.exists()


def test_a_pool_sized_from_gpu_memory_on_the_cpu_is_refused_where_a_server_starts(tmp_path):
    for package, args in (("live", ["serve"]), ("analysis", ["calibrate", "--out", str(tmp_path)])):
        out = run(package, *args, "--gpu-memory-fraction", "0.5")
        assert out.returncode == 2, (package, out.stderr)
        assert out.stderr == (f"python -m {package} {args[0]}: gpu_memory_fraction sizes the KV "
                              "pool of a CUDA device; the device is cpu\n")
    assert not any(tmp_path.iterdir())
