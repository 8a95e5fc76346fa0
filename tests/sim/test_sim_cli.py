"""The command line, run as a user would: `python -m sim ...` in a subprocess."""
import fcntl
import json
import math
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest

from sim import build_setup, load_profile, replay
from sim.__main__ import main
from sim.profile import CPU_SMOLLM2
from sim.replay import PROGRESS_TICKS
from traces import SAMPLES_DIR, load_trace
from traces.outcome import read_outcomes

ROOT = Path(__file__).resolve().parents[2]


def run_sim(*args):
    return subprocess.run([sys.executable, "-m", "sim", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def trace(tmp_path):
    lines = [
        {"id": "a", "arrival_s": 0.0, "prompt_tokens": 10, "max_new_tokens": 3},
        {"id": "b", "arrival_s": 0.0, "prompt_tokens": 10, "max_new_tokens": 3,
         "client": {"read": "per_event", "pause_s": 2.0}},
        {"id": "c", "arrival_s": 0.5, "prompt_tokens": 10, "max_new_tokens": 8,
         "client": {"leave_after_tokens": 2, "leave_how": "rst"}},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_replay_prints_the_summary_and_writes_outcomes(trace, tmp_path):
    out = tmp_path / "out"
    result = run_sim("replay", "--trace", trace, "--constant-cost", 1.0, "--max-batch", 1,
                     "--num-blocks", 64, "--out", out)
    assert result.returncode == 0, result.stderr
    assert "ttft_client_p50_s" in result.stdout
    # One slot: a runs 0-3, b 3-6 (read at 4, 6, 8; final event at 10), c 6-8 and leaves
    # (cancelled at the step after): written in the order they ended.
    a, c, b = read_outcomes(out / "outcomes.parquet")
    assert (a.id, c.id, b.id) == ("a", "c", "b")
    assert (a.token_times_s, a.finish_s) == ([1.0, 2.0, 3.0], 3.0)
    assert (b.first_token_engine_s, b.token_times_s, b.finish_s) == (4.0, [4.0, 6.0, 8.0], 10.0)
    assert (c.admitted_s, c.left_s, c.tokens_read, c.finish_reason) == (6.0, 8.0, 2, "cancelled")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["makespan_s"] == 10.0 and summary["left"] == 1
    series = np.load(out / "timeseries.npy")
    assert series.dtype.names == ("time_s", "running", "waiting", "paused", "blocks_reserved",
                                  "tokens")
    assert series[0].tolist() == (1.0, 1, 1, 0, 1, 1)


def test_the_pace_prices_every_step_at_that_many_times_its_price(trace, tmp_path):
    out = tmp_path / "out"
    # half a second a step on a host twice as slow: the second a step of the replay above
    result = run_sim("replay", "--trace", trace, "--constant-cost", 0.5, "--pace", 2,
                     "--max-batch", 1, "--num-blocks", 64, "--out", out)
    assert result.returncode == 0, result.stderr
    a, c, b = read_outcomes(out / "outcomes.parquet")
    assert (a.token_times_s, b.finish_s, c.left_s) == ([1.0, 2.0, 3.0], 10.0, 8.0)
    setup = json.loads((out / "setup.json").read_text())
    assert setup["cost"] == {"ScaledCost": {"model": {"seconds": 0.5}, "factor": 2.0}}
    refused = run_sim("replay", "--trace", trace, "--constant-cost", 0.5, "--pace", 0)
    assert refused.returncode == 2 and "--pace: must be above 0, not 0" in refused.stderr


def test_sweep_prints_one_row_per_setting(trace):
    result = run_sim("sweep", "--trace", trace, "--constant-cost", 1.0, "--num-blocks", 64,
                     "--param", "max_batch=1,4", "--param", "policy=unbounded,naive")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()
    assert header.split()[:3] == ["max_batch", "policy", "completed"]
    assert [row.split()[:2] for row in rows] == [["1", "unbounded"], ["1", "naive"],
                                                 ["4", "unbounded"], ["4", "naive"]]


def test_fit_writes_a_profile_replay_can_use(trace, tmp_path):
    log = tmp_path / "steps.jsonl"
    log.write_text("".join(
        json.dumps({"step": i, "start_s": i * 0.1, "duration_s": 0.002 + 0.001 * (i % 7) + 1e-5 * (i % 5),
                    "num_prefills": 0, "prefill_tokens": 0, "prefill_tokens_sq": 0,
                    "decode_batch": i % 7, "context_tokens": 50 * (i % 5), "device": "cpu"}) + "\n"
        for i in range(1, 101)))
    profile = tmp_path / "p.json"
    result = run_sim("fit", log, "-o", profile, "--hardware", "test-cpu", "--model", "tiny",
                     "--dtype", "fp32", "--max-batch", 4)
    assert result.returncode == 0, result.stderr
    data = json.loads(profile.read_text())
    assert data["coefficients"]["decode_batch"] == pytest.approx(0.001, rel=1e-6)
    assert (data["hardware"], data["device"], data["max_batch"]) == ("test-cpu", "cpu", 4)
    result = run_sim("replay", "--trace", trace, "--profile", profile)
    assert result.returncode == 0, result.stderr


def test_errors_are_one_line_without_a_traceback(trace):
    result = run_sim("replay", "--trace", trace, "--profile", "no-such-profile")
    assert result.returncode == 2
    assert "no profile 'no-such-profile'" in result.stderr and "Traceback" not in result.stderr
    result = run_sim("sweep", "--trace", trace, "--constant-cost", 1, "--param", "max_bacth=1,2")
    assert result.returncode == 2 and "unknown settings ['max_bacth']" in result.stderr


FORMATS = {
    "native.jsonl": '{"id": "0", "arrival_s": 0.0, "prompt_tokens": 30, "max_new_tokens": 4}\n'
                    '{"id": "1", "arrival_s": 1.5, "prompt_tokens": 20, "max_new_tokens": 2}\n',
    "mooncake.jsonl": '{"timestamp": 1000, "input_length": 30, "output_length": 4, "hash_ids": [0]}\n'
                      '{"timestamp": 2500, "input_length": 20, "output_length": 2, "hash_ids": [1]}\n',
    "azure.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.5,30,4\n2023-11-16 18:15:48.0,20,2\n",
    "burstgpt.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,30,4,34,Conversation log\n6.5,GPT-4,20,2,22,API log\n",
    "vidur.csv": "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,30,4\n1.5,20,2\n",
    "vidur_lengths.csv": "num_prefill_tokens,num_decode_tokens\n30,4\n20,2\n",
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_replay_takes_a_trace_of_any_format_as_its_argument(name, tmp_path, capsys):
    path = tmp_path / name
    path.write_text(FORMATS[name])
    out = tmp_path / "out"
    assert main(["replay", str(path), "--constant-cost", "0.5", "--out", str(out)]) == 0
    assert "2 requests" in capsys.readouterr().out
    outcomes = sorted(read_outcomes(out / "outcomes.parquet"), key=lambda o: o.prompt_tokens,
                      reverse=True)  # in trace order (written in the order they ended)
    second_arrival = 0.0 if name == "vidur_lengths.csv" else 1.5
    assert [(o.arrival_s, o.prompt_tokens, o.max_new_tokens) for o in outcomes] == [
        (0.0, 30, 4), (second_arrival, 20, 2)]
    assert [(o.finish_reason, o.tokens_read) for o in outcomes] == [("length", 4), ("length", 2)]
    assert json.loads((out / "setup.json").read_text())["trace"] == str(path)


def test_the_trace_option_and_the_argument_are_the_same(trace, tmp_path, capsys):
    for how, args in (("option", ["--trace", str(trace)]), ("argument", [str(trace)])):
        assert main(["replay", *args, "--max-batch", "1", "--out", str(tmp_path / how)]) == 0
    for name in ("outcomes.parquet", "summary.json", "setup.json", "timeseries.npy"):
        assert (tmp_path / "option" / name).read_bytes() == (tmp_path / "argument" / name).read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["replay", str(trace), "--trace", str(trace)])
    assert "not allowed with argument trace" in capsys.readouterr().err


def test_replay_loads_the_trace_with_the_loader_options(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["replay", str(SAMPLES_DIR / "azure_conv_200.jsonl"), "--sample", "0.25",
                 "--seed", "3", "--max-prompt-tokens", "100", "--out", str(out)]) == 0
    outcomes = read_outcomes(out / "outcomes.parquet")
    assert len(outcomes) == 50 and max(o.prompt_tokens for o in outcomes) == 100
    load = json.loads((out / "setup.json").read_text())["load"]
    assert load == {"sample": 0.25, "seed": 3, "max_prompt_tokens": 100}


def test_the_progress_hook_sees_every_request_finish_and_changes_nothing():
    trace = load_trace(SAMPLES_DIR / "mixed.jsonl")
    setup = build_setup(load_profile(CPU_SMOLLM2).cost_model(), num_blocks=256, max_batch=4)
    told = []
    quiet = replay(trace, setup)
    watched = replay(trace, setup, progress=lambda now, finished: told.append((now, finished)))
    assert watched.outcomes == quiet.outcomes and watched.summary == quiet.summary
    assert watched.series.rows() == quiet.series.rows()
    times, finished = zip(*told)
    assert list(times) == sorted(times) and list(finished) == sorted(finished)
    assert finished[-1] == len(trace) and finished[0] < len(trace)
    assert times[-1] >= quiet.summary.makespan_s
    # PROGRESS_TICKS wakes over the arrivals, and the drain after them adds wakes
    # only as the log of its length: never one per step or per request.
    span = trace[-1].arrival_s
    assert len(told) <= PROGRESS_TICKS * (2 + math.log(quiet.summary.makespan_s / span))


def run_on_a_terminal(*args) -> tuple[str, str]:
    """Runs `python -m sim ARGS` with stderr on a pseudo-terminal; returns what the
    terminal showed and stdout."""
    terminal, stderr = pty.openpty()
    fcntl.ioctl(stderr, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    with subprocess.Popen([sys.executable, "-m", "sim", *map(str, args)], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=stderr, text=True) as process:
        os.close(stderr)
        shown = b""
        while True:
            try:
                chunk = os.read(terminal, 65536)
            except OSError:  # the other side has closed
                break
            if not chunk:
                break
            shown += chunk
        stdout = process.stdout.read()
    os.close(terminal)
    assert process.returncode == 0, shown
    return shown.decode(), stdout


def test_a_progress_bar_on_a_terminal_and_none_when_quiet_or_piped():
    trace = SAMPLES_DIR / "mixed.jsonl"
    shown, stdout = run_on_a_terminal("replay", trace)
    assert "replay: 100%" in shown and "40/40" in shown and "s simulated" in shown
    assert "40 requests" in stdout
    shown, _ = run_on_a_terminal("replay", trace, "--quiet")
    assert shown == ""
    shown, stdout = run_on_a_terminal("sweep", trace, "--param", "max_batch=4,8", "--jobs", "2")
    assert "sweep: 100%" in shown and "2/2" in shown
    assert len(stdout.splitlines()) == 3
    piped = run_sim("replay", trace)
    assert piped.returncode == 0 and piped.stderr == ""
