"""Sweeps: one replay per combination of settings, on local processes or a Ray
cluster, rows in grid order whatever order the replays finish in."""
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim import ConstantCost, build_setup, load_profile, replay
from sim.__main__ import main
from sim.profile import CPU_SMOLLM2
from sim.fitted_ranges import FittedRanges
from sim.sweep import format_sweep, sweep, write_sweep
from traces import SAMPLES_DIR, load_trace, shape

ROOT = Path(__file__).resolve().parents[2]
MIXED = SAMPLES_DIR / "mixed.jsonl"
GRID = ["--param", "policy=unbounded,pause_then_drop", "--param", "max_batch=2,16",
        "--param", "rate_scale=1,3", "--param", "num_blocks=64",
        # Slow readers' connections fill up, so the policy matters.
        "--max-queued", "2", "--stall-timeout-s", "1", "--transport-bytes", "512"]


def run_sweep(*args):
    return subprocess.run([sys.executable, "-m", "sim", "sweep", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_two_jobs_print_exactly_the_table_of_one(tmp_path):
    one = run_sweep(MIXED, *GRID, "--jobs", 1)
    two = run_sweep(MIXED, *GRID, "--jobs", 2, "--out", tmp_path)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    table = one.stdout.strip().splitlines()
    assert two.stdout.strip().splitlines()[:-1] == table  # and a line naming the files
    header, *rows = [line.split() for line in table]
    assert header[:5] == ["policy", "max_batch", "rate_scale", "num_blocks", "completed"]
    assert [row[:3] for row in rows] == [[p, b, r] for p in ("unbounded", "pause_then_drop")
                                         for b in ("2", "16") for r in ("1", "3")]
    makespan = header.index("makespan_s")
    assert len({row[makespan] for row in rows}) > 4  # the settings made a difference

    with open(tmp_path / "sweep.csv") as f:
        written = list(csv.DictReader(f))
    assert [[r["policy"], r["max_batch"], r["rate_scale"]] for r in written] == [row[:3] for row in rows]
    about = json.loads((tmp_path / "sweep.json").read_text())
    assert about["grid"]["max_batch"] == [2, 16] and about["max_queued"] == 2
    assert [r["makespan_s"] for r in about["rows"]] == [float(r["makespan_s"]) for r in written]


def test_each_row_is_the_replay_of_its_settings_in_grid_order():
    trace = load_trace(MIXED)
    cost = load_profile(CPU_SMOLLM2).cost_model()
    base = {"num_blocks": 128, "max_batch": 4}
    grid = {"rate_scale": [0.5, 2], "policy": ["unbounded", "drop"], "stall_timeout_s": [0.5]}
    finished = []
    rows = sweep(trace, cost, base, grid, jobs=2, on_done=lambda: finished.append(1))
    assert len(finished) == 4
    assert [varied for varied, _, _ in rows] == [
        {"rate_scale": r, "policy": p, "stall_timeout_s": 0.5}
        for r in (0.5, 2) for p in ("unbounded", "drop")]
    for varied, summary, _ in rows:
        faster = shape(trace, time_scale=1 / varied["rate_scale"])
        setup = build_setup(cost, **base, policy=varied["policy"], stall_timeout_s=0.5)
        assert summary == replay(faster, setup).summary
    assert rows == sweep(trace, cost, base, grid, jobs=1)


@pytest.mark.parametrize("grid, problem", [
    ({"max_bacth": [1, 2]}, "unknown settings ['max_bacth']"),
    ({"rate_scale": [1, 0]}, "rate_scale must be a positive number, got 0"),
    ({"policy": ["unbounded", "patient"]}, "patient"),
])
def test_a_bad_combination_is_refused_before_any_replay(grid, problem):
    finished = []
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        sweep(load_trace(MIXED), ConstantCost(0.01), {"num_blocks": 64}, grid, jobs=2,
              on_done=lambda: finished.append(1))
    assert finished == []
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        sweep(load_trace(MIXED), ConstantCost(0.01), {"num_blocks": 64}, {"max_batch": [1]}, jobs=0)


def test_ray_when_it_is_missing_is_one_clear_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an import of a missing package does
    code = main(["sweep", str(MIXED), "--constant-cost", "0.01", "--param", "max_batch=1,2",
                 "--ray", "local"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.strip() == ("python -m sim sweep: a sweep on Ray needs the ray package: "
                           "pip install 'twinstep[ray]'")


def test_a_local_ray_cluster_gives_the_same_rows():
    pytest.importorskip("ray")
    trace = load_trace(MIXED)
    cost = load_profile(CPU_SMOLLM2).cost_model()
    grid = {"max_batch": [2, 8], "rate_scale": [1, 2]}
    finished = []
    on_ray = sweep(trace, cost, {"num_blocks": 128}, grid, ray_address="local",
                   on_done=lambda: finished.append(1))
    assert len(finished) == 4
    assert on_ray == sweep(trace, cost, {"num_blocks": 128}, grid, jobs=1)


def test_rows_past_the_fit_say_which_feature_and_how_far(tmp_path):
    trace = load_trace(MIXED)
    cost = load_profile(CPU_SMOLLM2).cost_model()
    fitted = FittedRanges(num_prefills=64, prefill_tokens=100_000, decode_batch=4,
                          context_tokens=10_000_000)
    rows = sweep(trace, cost, {"num_blocks": 512}, {"max_batch": [2, 4, 8]}, fitted=fitted)
    assert [beyond for _, _, beyond in rows][:2] == [(), ()]
    (past,) = rows[2][2]
    assert (past.feature, past.fitted) == ("decode_batch", 4) and 4 < past.reached <= 8
    table = format_sweep(rows).splitlines()
    assert table[0].split()[-1] == "beyond_fit"
    assert [line.split()[-1] for line in table[1:]] == ["-", "-", f"decode_batch:{past.reached / 4:.1f}x"]
    write_sweep(tmp_path, rows, {})
    with open(tmp_path / "sweep.csv") as f:
        assert [r["beyond_fit"] for r in csv.DictReader(f)] == ["", "", table[3].split()[-1]]
