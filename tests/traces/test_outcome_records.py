"""Per-request records on disk: Parquet written as outcomes come, read back to the
bit; JSON lines of older runs still read; what the simulator's command line writes
is the replay's own outcomes."""
import json
import math
import random

import pyarrow.parquet as pq
import pytest

from sim import ConstantCost, build_setup, replay
from sim.__main__ import main
from traces import SAMPLES_DIR, load_trace
from traces.outcome import (ROWS_PER_GROUP, OutcomeWriter, Refusal, RequestOutcome,
                            read_outcome_table, read_outcomes, write_outcomes)

AWKWARD = [0.1 + 0.2, math.pi, 5e-324, 1e308, 2.0 ** -40, 1 / 3, 123456.789012345]


def streamed(id: str, arrival_s: float, times: list[float]) -> RequestOutcome:
    return RequestOutcome(id, arrival_s, 17, len(times), admitted_s=arrival_s + 1e-9,
                          first_token_engine_s=times[0], headers_s=arrival_s + 0.1,
                          first_token_client_s=times[0], token_times_s=times,
                          finish_s=times[-1], finish_reason="length",
                          tokens_generated=len(times), tokens_read=len(times))


def assorted() -> list[RequestOutcome]:
    return [
        streamed("awkward", 0.1 + 0.7, AWKWARD),
        RequestOutcome("refused", 0.5, 9000, 16, finish_s=0.5, refused=Refusal.TOO_LARGE),
        RequestOutcome("refused-as-text", 0.6, 9, 16, finish_s=0.6, refused="queue_full"),
        RequestOutcome("left-before-a-token", 1.0, 8, 8, admitted_s=1.25, headers_s=1.1,
                       finish_s=1.5, finish_reason="cancelled", tokens_generated=3,
                       tokens_after_leave=3, left_s=1.5),
        RequestOutcome("bare", 2.0, 0, 0),
    ]


def bits(outcomes: list[RequestOutcome]) -> list[list[str]]:
    """Every float of the records, spelled to the bit."""
    return [[float.hex(t) for t in o.token_times_s] +
            [float.hex(v) for v in (o.arrival_s, o.admitted_s, o.first_token_engine_s,
                                    o.headers_s, o.first_token_client_s, o.finish_s, o.left_s)
             if v is not None] for o in outcomes]


def test_records_read_back_exactly(tmp_path):
    path = tmp_path / "outcomes.parquet"
    written = assorted()
    write_outcomes(path, written)
    assert path.read_bytes()[:4] == b"PAR1"
    read = read_outcomes(path)
    assert read == written
    assert bits(read) == bits(written)
    bare = read[-1]
    assert (bare.admitted_s, bare.finish_reason, bare.refused, bare.token_times_s) == \
        (None, None, None, [])
    assert [o.refused for o in read[1:3]] == ["too_large", "queue_full"]
    assert all(type(o.prompt_tokens) is int for o in read)


def test_no_records_make_a_file_that_reads_as_none(tmp_path):
    write_outcomes(tmp_path / "empty.parquet", [])
    assert read_outcomes(tmp_path / "empty.parquet") == []
    assert read_outcome_table(tmp_path / "empty.parquet").num_rows == 0


def test_many_records_span_row_groups_and_keep_the_order_written(tmp_path):
    rng = random.Random(3)
    written = [streamed(f"r{i}", rng.uniform(0, 3600),
                        [rng.uniform(0, 3600) for _ in range(rng.randrange(1, 6))])
               for i in range(20_000)]
    rng.shuffle(written)  # neither by id nor by arrival: finished in any order
    path = tmp_path / "outcomes.parquet"
    write_outcomes(path, written)
    groups = pq.ParquetFile(path).metadata
    assert groups.num_rows == 20_000
    assert groups.num_row_groups == math.ceil(20_000 / ROWS_PER_GROUP)
    assert read_outcomes(path) == written


def test_the_writer_takes_outcomes_one_at_a_time_and_holds_a_group_at_most(tmp_path):
    path = tmp_path / "outcomes.parquet"
    written = [streamed(f"r{i}", float(20 - i), [20.0 + i]) for i in range(20)]
    with OutcomeWriter(path, rows_per_group=7) as writer:
        for o in written:
            writer.write(o)
    groups = pq.ParquetFile(path).metadata
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [7, 7, 6]
    assert [o.id for o in read_outcomes(path)] == [f"r{i}" for i in range(20)]


def test_records_without_token_times_read_back_with_empty_lists(tmp_path):
    path = tmp_path / "outcomes.parquet"
    written = assorted()
    write_outcomes(path, written, token_times=False)
    assert "token_times_s" not in read_outcome_table(path).column_names
    read = read_outcomes(path)
    assert all(o.token_times_s == [] for o in read)
    for o in written:
        o.token_times_s = []
    assert read == written


def test_the_table_has_a_column_a_field(tmp_path):
    path = tmp_path / "outcomes.parquet"
    written = assorted()
    write_outcomes(path, written)
    table = read_outcome_table(path)
    assert table.column_names == list(RequestOutcome.__slots__)
    assert table["arrival_s"].to_numpy().tolist() == [o.arrival_s for o in written]
    assert table["token_times_s"].combine_chunks().values.to_numpy().tolist() == AWKWARD
    assert table["refused"].to_pylist() == [None, "too_large", "queue_full", None, None]


def test_json_lines_of_an_older_run_still_read(tmp_path):
    path = tmp_path / "outcomes.jsonl"
    now = assorted()
    older = {"id": "old", "arrival_s": 0.0, "prompt_tokens": 4, "max_new_tokens": 8,
             "token_times_s": [0.2, 0.3], "finish_reason": "length", "tokens_read": 2}
    lines = [{name: getattr(o, name) for name in o.__slots__} for o in now] + [older]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    *read, old = read_outcomes(path)
    assert read == now
    assert (old.headers_s, old.token_times_s, old.finish_reason) == (None, [0.2, 0.3], "length")
    table = read_outcome_table(path)
    assert table["id"].to_pylist() == [o.id for o in now] + ["old"]


@pytest.mark.parametrize("token_times", [True, False])
def test_the_simulators_command_line_writes_the_replays_outcomes(token_times, tmp_path, capsys):
    trace = SAMPLES_DIR / "mixed.jsonl"
    out = tmp_path / "out"
    flags = [] if token_times else ["--no-token-times"]
    assert main(["replay", str(trace), "--constant-cost", "0.01", "--max-batch", "4",
                 "--policy", "pause_then_drop", "--max-queued", "2", "--stall-timeout-s", "0.15",
                 "--transport-bytes", "512", "--out", str(out), "--quiet", *flags]) == 0
    assert "outcomes.parquet" in capsys.readouterr().out
    setup = json.loads((out / "setup.json").read_text())
    settings = {k: v for k, v in setup.items() if k not in ("trace", "load", "cost")}
    requests, setup = load_trace(trace), build_setup(ConstantCost(0.01), **settings)
    expected = replay(requests, setup).outcomes
    ended: list[RequestOutcome] = []
    assert replay(requests, setup, records=ended.append).outcomes == []
    # the records are the replay's, written in the order the requests ended
    in_trace = [o.id for o in expected]
    assert sorted(ended, key=lambda o: in_trace.index(o.id)) == expected
    assert [o.id for o in ended] != [o.id for o in expected]
    assert {o.finish_reason for o in expected} >= {"length", "cancelled"}
    if not token_times:
        for o in ended:
            o.token_times_s = []
    assert read_outcomes(out / "outcomes.parquet") == ended
