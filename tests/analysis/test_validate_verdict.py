"""A cell's verdict: the simulator's error against the median of the live runs,
live's own spread shown beside it, counts judged in their units, and each live run
judged in the simulator's place against the others; and the matrix's table, heat
map and JSON."""
import json

import pytest

from analysis.validate.matrix import QUICK, SETTINGS, TRACES, cells
from analysis.validate.report import markdown, tally, write_validation
from analysis.validate.verdict import FIGURES, CellVerdict, cell_verdict, judge
from traces.summary import Tally


def Summary_of(**counts):
    """A summary of no request, with the counts given, as a cell keeps it."""
    from dataclasses import replace
    with Tally(None) as tally:
        return replace(tally.summary(tokens_generated=0), **counts).as_dict()


def test_the_error_is_against_the_median_and_the_spread_is_shown_not_added():
    j = judge("ttft_client_p50_s", [1.0, 1.2, 1.1], 1.2, leavers=0)
    assert j.live_median == 1.1 and j.spread == pytest.approx(0.2 / 1.1)
    assert j.error == pytest.approx(0.1 / 1.1) and j.bound == 0.10 and j.ok
    over = judge("ttft_client_p50_s", [1.0, 1.2, 1.1], 1.25, leavers=0)
    assert over.bound == 0.10 and over.ok is False  # live moving by 18% widens nothing


def test_each_figure_has_the_bound_a_what_if_is_held_to():
    assert judge("ttft_client_p99_s", [2.0], 2.39, leavers=0).ok
    assert judge("stall_p99_s", [0.5, 0.5], 0.61, leavers=0).ok is False
    assert judge("throughput_tok_s", [100.0], 104.0, leavers=0).ok
    assert judge("throughput_tok_s", [100.0], 94.0, leavers=0).ok is False
    gap = judge("gap_p99_s", [0.1], 0.5, leavers=0)
    assert gap.error == pytest.approx(4.0) and gap.bound is None and gap.ok is None


def test_counts_are_judged_in_their_units():
    wasted = judge("wasted_tokens", [6, 8, 7], 9, leavers=2)
    assert (wasted.live_median, wasted.error, wasted.spread, wasted.bound) == (7, 2.0, 2.0, 2.0)
    assert wasted.ok and judge("wasted_tokens", [7, 7, 7], 10, leavers=2).ok is False
    assert judge("preemptions", [5, 5, 6], 5, leavers=0).ok
    assert judge("preemptions", [5, 5, 5], 6, leavers=0).ok is False


def test_each_live_run_is_judged_against_the_median_of_the_others():
    # 1.0 against 1.35 (-25.9%), 1.2 against 1.25 (-4%), 1.5 against 1.1 (+36.4%)
    j = judge("ttft_client_p50_s", [1.0, 1.2, 1.5], 1.2, leavers=0)
    assert j.ok and j.live_error == pytest.approx(0.4 / 1.1) and j.live_ok is False
    # 1.0 against 1.075 (-7.0%), 1.05 against 1.05, 1.1 against 1.025 (+7.3%)
    steady = judge("ttft_client_p50_s", [1.0, 1.05, 1.1], 1.3, leavers=0)
    assert steady.ok is False and steady.live_error == pytest.approx(0.075 / 1.025)
    assert steady.live_ok
    # counts in their units: 5 against 5.5 twice, 6 against 5
    preempted = judge("preemptions", [5, 5, 6], 5, leavers=0)
    assert preempted.ok and (preempted.live_error, preempted.live_ok) == (1.0, False)
    gap = judge("gap_p99_s", [0.1, 0.2], 0.15, leavers=0)
    # 0.1 against 0.2 (-50%), 0.2 against 0.1 (+100%)
    assert gap.live_error == pytest.approx(1.0) and gap.live_ok is None  # shown, not judged
    alone = judge("throughput_tok_s", [100.0], 104.0, leavers=0)
    assert (alone.live_error, alone.live_ok) == (None, None)
    agree = {"completed": {"live": [8], "sim": 8}}
    assert CellVerdict("t", "s", 1, [alone], agree, []).live_ok is None


def test_a_side_without_the_figure_is_not_judged():
    j = judge("stall_p99_s", [None, None], 0.3, leavers=0)
    assert j.ok is None and j.error is None
    assert judge("stall_p99_s", [0.2, None, 0.4], None, leavers=0).ok is None


def test_a_cell_is_within_bounds_only_if_its_counts_agree_exactly():
    live = [Summary_of(completed=8, left=2, tokens_read=120)] * 3
    same = cell_verdict("t", "s", live, Summary_of(completed=8, left=2, tokens_read=120), 2, [])
    assert same.counts_agree and same.counts["completed"] == {"live": [8, 8, 8], "sim": 8}
    other = cell_verdict("t", "s", live, Summary_of(completed=8, left=2, tokens_read=119), 2, [])
    assert not other.counts_agree and not other.ok


def test_a_cell_where_no_request_was_served_is_not_judged_and_the_tally_names_it():
    refused = [Summary_of(completed=0, left=0, tokens_read=0)] * 3
    empty = cell_verdict("mooncake-long", "optimistic-small-pool", refused,
                         Summary_of(completed=0, left=0, tokens_read=0), 0, [])
    assert empty.counts_agree and not empty.served
    assert (empty.ok, empty.live_ok, empty.ok_at_check, empty.ok_at_pace) == (None,) * 4
    good, bad = verdicts()
    assert tally([good, empty, bad]) == (
        "1 of 2 cells within bounds (not judged, no request served on either side: "
        "mooncake-long × optimistic-small-pool; each live run against the median of the "
        "others: 2 of 2)")
    assert markdown([empty]).splitlines()[2].endswith("| equal | - | - | - | - | - | - |")
    served_once = cell_verdict("t", "s", refused, Summary_of(completed=1, left=0, tokens_read=0),
                               0, [])
    assert served_once.served and served_once.ok is False  # one side served: the counts differ


def verdicts():
    agree = {"completed": {"live": [8, 8, 8], "sim": 8}}
    good = CellVerdict("mixed", "default", 3,
                       [judge(f, [1.0, 1.0, 1.0], 1.0 if f == "preemptions" else 1.04, leavers=3)
                        for f in FIGURES], agree, [])
    bad = CellVerdict("bursty-long", "batch-32", 3,
                      [judge(f, [1.0, 1.0, 1.0], 1.5, leavers=0) for f in FIGURES], agree,
                      ["sequences decoded in one step (decode_batch) reached 32; ..."])
    return [good, bad]


def test_the_table_marks_what_is_over_and_the_tally_counts_the_cells(tmp_path):
    good, bad = verdicts()
    assert good.ok and not bad.ok
    table = markdown([good, bad]).splitlines()
    assert table[0].split(" | ")[3:5] == ["TTFT p50", "TTFT p99"]
    assert "| +4.0% (live ±0%) |" in table[2]
    assert table[2].endswith("| equal | yes | yes | - | - | - | - |")
    assert "**+50.0% (live ±0%)**" in table[3] and table[3].endswith("| **no** | yes | - | - | - | - |")
    assert "| +50.0% (live ±0%) |" in table[3]  # the gap p99: shown, not judged
    line = "1 of 2 cells within bounds (each live run against the median of the others: 2 of 2)"
    assert tally([good, bad]) == line
    md, js, png = write_validation([good, bad], tmp_path, "a header")
    data = json.loads(js.read_text())
    assert data["tally"] == line
    assert [(c["ok"], c["live_ok"]) for c in data["cells"]] == [(True, True), (False, True)]
    assert [f["figure"] for f in data["cells"][0]["figures"]] == list(FIGURES)
    assert "decode_batch" in md.read_text() and png.read_bytes()[:4] == b"\x89PNG"


def test_a_cell_is_judged_again_at_the_pace_its_host_ran():
    live = [Summary_of(completed=8, left=2, tokens_read=120, throughput_tok_s=t)
            for t in (100.0, 90.0, 95.0)]
    at_price = Summary_of(completed=8, left=2, tokens_read=120, throughput_tok_s=105.0)
    at_check = Summary_of(completed=8, left=2, tokens_read=120, throughput_tok_s=100.0)
    at_pace = Summary_of(completed=8, left=2, tokens_read=120, throughput_tok_s=96.0)
    cell = cell_verdict("mixed", "default", live, at_price, 2, [],
                        at_check=([1.10, 1.02, 1.06], 1.06, at_check),
                        at_pace=([1.05, 1.12, None], 1.085, at_pace))
    # +10.5% at the profile's prices; +5.3% at the checks' pace; +1.1% at the runs'
    # own pace
    assert (cell.at_check.pace, cell.at_pace.pace) == (1.06, 1.085)
    assert (cell.ok, cell.ok_at_check, cell.ok_at_pace) == (False, False, True)
    checked, paced = ({j.figure: j for j in r.judged} for r in (cell.at_check, cell.at_pace))
    assert checked["throughput_tok_s"].error == pytest.approx(5 / 95)
    assert paced["throughput_tok_s"].error == pytest.approx(1 / 95)
    row = markdown([cell]).splitlines()[2]
    assert row.endswith("| equal | **no** | **no** | 1.06 (1.02–1.10) | **no** "
                        "| 1.08 (1.05–1.12) | yes |")
    assert tally([cell]) == ("0 of 1 cells within bounds (each live run against the median of "
                             "the others: 0 of 1; at the price checks' pace: 0 of 1; at the "
                             "pace of the runs' own steps: 1 of 1)")
    data = cell.as_dict()
    assert (data["checks"], data["check"], data["ok_at_check"]) == ([1.10, 1.02, 1.06], 1.06,
                                                                    False)
    assert (data["paces"], data["ok_at_pace"]) == ([1.05, 1.12, None], True)
    # counts that differ at the other prices fail the cell there too
    shifted = Summary_of(completed=8, left=2, tokens_read=119, throughput_tok_s=96.0)
    assert cell_verdict("mixed", "default", live, at_price, 2, [],
                        at_pace=([1.05], 1.05, shifted)).ok_at_pace is False
    unpaced = cell_verdict("mixed", "default", live, at_price, 2, [])
    assert (unpaced.ok_at_check, unpaced.ok_at_pace) == (None, None)


def test_counts_show_their_spread_unrounded():
    agree = {"completed": {"live": [8, 8, 8], "sim": 8}}
    cell = CellVerdict("bursty-long", "optimistic-small-pool", 3,
                       [judge(f, [10, 11, 11], 9, leavers=0) for f in FIGURES], agree, [])
    row = markdown([cell]).splitlines()[2]
    assert row.endswith("| **-2 (live ±0.5)** | equal | **no** | **no** | - | - | - | - |")


def test_the_matrix_is_every_setting_by_every_trace_and_quick_is_a_subset():
    matrix = cells()
    assert len(matrix) == len(SETTINGS) * len(TRACES)
    assert [c.settings for c in matrix[:len(TRACES)]] == ["default"] * len(TRACES)
    assert [(c.trace, c.settings) for c in cells(quick=True)] == list(QUICK)
    assert [c.name for c in cells(traces=["mixed"], settings=["drop"])] == ["mixed × drop"]
    with pytest.raises(ValueError, match="unknown traces"):
        cells(traces=["nope"])


@pytest.mark.parametrize("name", list(TRACES))
def test_every_trace_fits_a_small_context(name):
    try:
        trace = TRACES[name](512)
    except FileNotFoundError:
        pytest.skip("the public traces beside the project are not here")
    assert trace and all(r.prompt_tokens + r.max_new_tokens <= 512 for r in trace)
    assert len({r.id for r in trace}) == len(trace)
    assert [r.arrival_s for r in trace] == sorted(r.arrival_s for r in trace)


def test_the_simulated_side_is_the_median_of_replays_each_with_its_own_draws():
    """With a scatter of step times, one replay is one draw, as one live run is:
    each figure and count is the median over `SIM_SEEDS` seeds. Without one, every
    replay is the same, and one is run."""
    import statistics
    from dataclasses import replace

    from analysis.validate.run import SIM_SEEDS, _simulated
    from sim import ConstantCost, build_setup, replay

    trace = TRACES["mixed"](2048)
    setup = build_setup(ConstantCost(0.05), step_scatter=(0.5, 1.0, 2.0), num_blocks=256)
    sim, _ = _simulated(trace, setup)
    each = [replay(trace, replace(setup, scatter_seed=seed)).summary.as_dict()
            for seed in range(SIM_SEEDS)]
    assert len({e["ttft_client_p50_s"] for e in each}) == SIM_SEEDS
    for name in FIGURES + ("completed", "left", "tokens_read"):
        assert sim[name] == statistics.median(e[name] for e in each), name
    steady = replace(setup, step_scatter=())
    assert _simulated(trace, steady)[0] == replay(trace, steady).summary.as_dict()
