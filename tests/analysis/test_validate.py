"""`python -m analysis validate` on a tiny random model: one profile judged on
cells of two settings, each run live several times against one server a setting,
the simulated side once; what it writes holds every live run's figures."""
import json

import pytest

from analysis.__main__ import main as analysis_main
from analysis.calibrate import calibrate
from analysis.validate import matrix
from analysis.validate.run import validate
from analysis.validate.verdict import FIGURES
from analysis.workloads import calibration_workload
from scheduler.settings import ServeSettings
from sim import load_profile, load_step_log, pace
from sim.profile import CPU_SMOLLM2
from traces import ClientMix, Fixed, Uniform
from traces.outcome import read_outcomes
from traces.synthetic.conversations import conversations

from analysis_helpers import mixed_trace, save_tiny_llama
from live_server import running_server, tiny_app
from tiny_models import tiny_llama


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, smollm2):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smollm2.tokenizer)


def test_quick_cells_run_live_three_times_and_are_judged(model_dir, tmp_path, monkeypatch, capsys):
    settings = ServeSettings(model=str(model_dir), threads=1, max_batch=4, num_blocks=128)
    _, profile = calibrate(settings, tmp_path / "cal", log=lambda *a: None,
                           workload=calibration_workload(4, mixed_count=6, time_scale=0.1,
                                                         max_model_len=256))
    # the sample trace takes 45 s live: the quick cells get ten requests over a second
    monkeypatch.setitem(matrix.TRACES, "mixed", lambda max_model_len: mixed_trace())
    out = tmp_path / "validate"
    code = analysis_main(["validate", "--quick", "--model", str(model_dir), "--threads", "1",
                          "--max-batch", "4", "--num-blocks", "128", "--profile", str(profile),
                          "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    data = json.loads((out / "validate.json").read_text())
    assert [(c["trace"], c["settings"]) for c in data["cells"]] == list(matrix.QUICK)
    for cell in data["cells"]:
        assert cell["runs"] == 3
        # what the trace and the scheduler decide, live and simulated alike
        assert cell["counts_agree"] is True
        assert cell["counts"]["completed"] == {"live": [8, 8, 8], "sim": 8}
        assert cell["counts"]["left"] == {"live": [2, 2, 2], "sim": 2}
        figures = {f["figure"]: f for f in cell["figures"]}
        assert list(figures) == list(FIGURES)
        wasted = figures["wasted_tokens"]
        assert len(wasted["live"]) == 3 and wasted["bound"] == 2  # two leavers
        assert figures["preemptions"]["live"] == [0, 0, 0] and figures["preemptions"]["ok"]
        ttft = figures["ttft_client_p50_s"]
        assert all(v > 0 for v in ttft["live"]) and ttft["sim"] > 0
        assert ttft["live_median"] == sorted(ttft["live"])[1]
        assert ttft["error"] == pytest.approx((ttft["sim"] - ttft["live_median"]) / ttft["live_median"])
        assert figures["throughput_tok_s"]["ok"] is not None
        assert cell["ok"] == all(f["ok"] is not False for f in cell["figures"])
        # each live run in the simulator's place, against the median of the other two
        against = [(v - (a + b) / 2) / ((a + b) / 2)
                   for v, a, b in [(ttft["live"][i], *(ttft["live"][:i] + ttft["live"][i + 1:]))
                                   for i in range(3)]]
        assert ttft["live_error"] == pytest.approx(max(against, key=abs))
        assert ttft["live_ok"] == all(abs(e) <= 0.10 for e in against)
        assert cell["live_ok"] == all(f["live_ok"] is not False for f in cell["figures"])
    # each live run's records, one folder a run
    runs = sorted(p.name for p in (out / "mixed--chunked-64").iterdir())
    assert runs == ["run-1", "run-2", "run-3"]
    live = (out / "mixed--default" / "run-2" / "live-outcomes.parquet")
    assert live.exists()
    tally = (f"{sum(c['ok'] for c in data['cells'])} of 2 cells within bounds (each live run "
             f"against the median of the others: {sum(c['live_ok'] for c in data['cells'])} of "
             f"2; at the price checks' pace: {sum(c['ok_at_check'] for c in data['cells'])} "
             f"of 2; at the pace of the runs' own steps: "
             f"{sum(c['ok_at_pace'] for c in data['cells'])} of 2)")
    assert data["tally"] == tally and tally in printed
    # the runs went in rounds: each setting's server started again for each round,
    # and the second cell's first run came before the first cell's second
    assert sorted(p.name for p in out.glob("server-*.log")) == [
        f"server-{s}-run-{i}.log" for s in ("chunked-64", "default") for i in (1, 2, 3)]
    started = {(c, r): load_step_log(out / c / f"run-{r}" / "live-steps.jsonl")[0]["start_unix"]
               for c in ("mixed--default", "mixed--chunked-64") for r in (1, 2, 3)}
    assert (started["mixed--default", 1] < started["mixed--chunked-64", 1]
            < started["mixed--default", 2] < started["mixed--chunked-64", 2]
            < started["mixed--default", 3] < started["mixed--chunked-64", 3])
    # each run's pace, from the step log that run left
    cost = load_profile(profile).cost_model()
    for cell in data["cells"]:
        for r, recorded in enumerate(cell["paces"], start=1):
            steps = load_step_log(out / f"{cell['trace']}--{cell['settings']}" / f"run-{r}"
                                  / "live-steps.jsonl")
            assert recorded == pace(steps, cost)
        assert cell["pace"] == sorted(cell["paces"])[1]
        assert [f["figure"] for f in cell["figures_at_pace"]] == list(FIGURES)
        assert cell["counts_at_pace"]["completed"] == 8
    # each run's checked pace, from the price checks on its server just before and
    # just after it: none of their steps is among the run's own; the cell's, from
    # all its checks' steps together
    for cell in data["cells"]:
        every_check = []
        for r, recorded in enumerate(cell["checks"], start=1):
            folder = out / f"{cell['trace']}--{cell['settings']}" / f"run-{r}"
            checked = load_step_log(folder / "price-check-steps.jsonl")
            own = load_step_log(folder / "live-steps.jsonl")
            assert recorded == pace(checked, cost)
            before = [s for s in checked if s["start_unix"] < own[0]["start_unix"]]
            after = [s for s in checked if s["start_unix"] > own[-1]["start_unix"]]
            assert before and after and len(before) + len(after) == len(checked)
            assert {s["step"] for s in checked}.isdisjoint(s["step"] for s in own)
            every_check += checked
        assert cell["check"] == pace(every_check, cost)
        assert min(cell["checks"]) <= cell["check"] <= max(cell["checks"])
        assert [f["figure"] for f in cell["figures_at_check"]] == list(FIGURES)
        assert cell["counts_at_check"]["completed"] == 8
    assert (out / "validate.png").read_bytes()[:4] == b"\x89PNG"
    assert "| mixed | chunked-64 | 3 |" in (out / "validate.md").read_text()

    # the same live runs judged again: with the same profile, the same verdicts (the
    # simulator is deterministic); with another, the same live figures beside new ones
    again = tmp_path / "again"
    assert analysis_main(["validate", "--live-from", str(out), "--profile", str(profile),
                          "--out", str(again)]) == 0
    rejudged = json.loads((again / "validate.json").read_text())
    assert rejudged["cells"] == data["cells"]
    assert f"the live runs recorded in {out}" in rejudged["header"]
    slow = tmp_path / "slow.json"
    doubled = json.loads(profile.read_text())
    doubled["coefficients"] = {k: 2 * v for k, v in doubled["coefficients"].items()}
    doubled["batch_excess"] = [2 * v for v in doubled.get("batch_excess", [])]
    slow.write_text(json.dumps(doubled))
    assert analysis_main(["validate", "--live-from", str(out), "--profile", str(slow),
                          "--out", str(tmp_path / "slow")]) == 0
    for before, after in zip(data["cells"], json.loads((tmp_path / "slow" / "validate.json")
                                                       .read_text())["cells"]):
        assert after["counts"] == before["counts"]
        first, second = ({f["figure"]: f for f in cell["figures"]} for cell in (before, after))
        assert all(second[f]["live"] == first[f]["live"] for f in FIGURES)
        assert second["ttft_client_p50_s"]["sim"] > first["ttft_client_p50_s"]["sim"]
        # every price doubled: the host ran at half the pace, and at that pace the
        # simulator is where the right profile put it
        for read in ("check", "pace"):
            assert after[f"{read}s"] == pytest.approx([p / 2 for p in before[f"{read}s"]])
            for was, now in zip(before[f"figures_at_{read}"], after[f"figures_at_{read}"]):
                assert now["sim"] == pytest.approx(was["sim"], rel=1e-9)
            assert after[f"ok_at_{read}"] == before[f"ok_at_{read}"]
    assert analysis_main(["validate", "--live-from", str(out), "--profile", str(profile),
                          "--out", str(out)]) == 2


def test_a_running_server_is_judged_at_its_own_settings_only(tmp_path, monkeypatch):
    logged = []
    cells = [matrix.Cell("mixed", "default"), matrix.Cell("mixed", "batch-4")]
    monkeypatch.setitem(matrix.TRACES, "mixed", lambda max_model_len: mixed_trace()[:3])
    # a vocabulary that holds the ids a replay makes up for prompts known by length
    app, engine = tiny_app(ServeSettings(), model=tiny_llama(vocab_size=2048))
    with running_server(app) as url:
        verdicts = validate(url, load_profile(CPU_SMOLLM2), cells, 1, tmp_path / "v",
                            log=logged.append)
    assert [(v.trace, v.settings, v.runs) for v in verdicts] == [("mixed", "default", 1)]
    assert verdicts[0].counts["completed"] == {"live": [3], "sim": 3}
    assert verdicts[0].at_check.paces[0] > 0
    assert f"skipped: batch-4 (the server at {url} runs its own settings)" in logged
    assert engine.core.is_drained()


def test_a_closed_loop_cell_runs_each_session_in_turn_live_and_simulated(model_dir, tmp_path,
                                                                          monkeypatch):
    # the matrix's closed-loop trace, scaled down: four users of three turns, each
    # turn carrying the conversation, with a slow reader and leavers among them
    think_s = 0.2
    small = conversations(users=4, turns=3, think_s=think_s, history=True,
                          prompt_lengths=Uniform(8, 24), output_lengths=Fixed(6),
                          clients=ClientMix(slow=0.25, slow_pause_s=0.05, leave=0.25,
                                            leave_after_tokens=2), seed=5)
    monkeypatch.setitem(matrix.TRACES, "closed-8", lambda max_model_len: small)
    settings = ServeSettings(model=str(model_dir), threads=1, max_batch=4, num_blocks=128)
    [verdict] = validate(settings, load_profile(CPU_SMOLLM2), [matrix.Cell("closed-8", "default")],
                         2, tmp_path / "v", log=lambda *a: None)
    assert verdict.counts_agree
    assert verdict.counts["completed"] == {"live": [9, 9], "sim": 9}
    assert verdict.counts["left"] == {"live": [3, 3], "sim": 3}
    for run in ("run-1", "run-2"):
        sent = {o.id: o for o in read_outcomes(tmp_path / "v" / "closed-8--default" / run
                                               / "live-outcomes.parquet")}
        for user in range(4):
            for turn in (1, 2):
                before, after = sent[f"u{user}-t{turn - 1}"], sent[f"u{user}-t{turn}"]
                done = before.left_s if before.left_s is not None else before.finish_s
                # a turn goes only once its user is done with the last, and has thought
                assert after.arrival_s >= done + think_s - 1e-3


def test_every_closed_loop_trace_fits_the_context_and_keeps_its_sessions():
    for name in ("closed-1", "closed-8", "closed-16"):
        trace = matrix.TRACES[name](512)
        assert all(r.prompt_tokens + r.max_new_tokens <= 512 for r in trace)
        users = {r.session for r in trace}
        assert len(users) == int(name.split("-")[1])
        for user in users:
            turns = [r for r in trace if r.session == user]
            assert [r.id for r in turns] == [f"{user}-t{t}" for t in range(len(turns))]
