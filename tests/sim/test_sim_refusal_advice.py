"""A replay that turns most of its trace away says why and what to change: its
figures describe the few requests it served, not the trace."""
import json

import pytest

from sim.__main__ import main
from sim.summary import refusal_advice, refusals_by_reason
from traces.outcome import RequestOutcome
from traces.summary import Tally


def outcomes(served: int, refused: dict[str, int], dropped: int = 0) -> list[RequestOutcome]:
    done = [RequestOutcome(f"s{i}", 0.0, 4, 2, finish_s=1.0, finish_reason="length",
                           token_times_s=[0.5, 1.0], tokens_read=2) for i in range(served)]
    away = [RequestOutcome(f"{reason}{i}", 0.0, 4, 2, finish_s=0.0, refused=reason)
            for reason, n in refused.items() for i in range(n)]
    slow = [RequestOutcome(f"d{i}", 0.0, 4, 2, finish_s=2.0, finish_reason="slow_client")
            for i in range(dropped)]
    return done + away + slow


def advice(served: int, refused: dict[str, int], dropped: int = 0) -> str | None:
    records = outcomes(served, refused, dropped)
    with Tally.of(records) as tally:
        return refusal_advice(tally.summary(), refusals_by_reason(tally.refusals))


@pytest.mark.parametrize("reason, change", [
    ("queue_full", "--max-waiting"),
    ("too_large", "a larger --num-blocks or a model with a longer context"),
    ("key_limit", "--max-streams-per-key/--max-waiting-per-key"),
])
def test_the_main_refusal_is_named_with_what_to_change(reason, change):
    line = advice(3, {reason: 5, "invalid": 1})
    assert line.startswith(f"6 of 9 requests were refused or dropped, 5 of them {reason}: ")
    assert change in line and "\n" not in line


def test_drops_of_slow_readers_count_and_may_be_the_main_reason():
    line = advice(2, {"queue_full": 1}, dropped=3)
    assert line.startswith("4 of 6 requests were refused or dropped, 3 of them slow_client: ")
    assert "--stall-timeout-s or --policy" in line


def test_a_reason_with_no_advice_is_named_alone():
    assert advice(1, {"invalid": 2}) == "2 of 3 requests were refused or dropped, 2 of them invalid"


def test_half_or_fewer_turned_away_says_nothing():
    assert advice(2, {"queue_full": 2}) is None
    assert advice(2, {"queue_full": 1}, dropped=1) is None
    assert advice(0, {}) is None


def test_a_replay_that_overflows_its_waiting_queue_says_so(tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"id": f"r{i}", "arrival_s": 0.0, "prompt_tokens": 8,
                                         "max_new_tokens": 4}) + "\n" for i in range(10)))
    assert main(["replay", str(trace), "--constant-cost", "1", "--max-batch", "1",
                 "--max-waiting", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "refused queue_full" in " ".join(printed[-3].split())
    assert printed[-1].startswith("9 of 10 requests were refused or dropped, 9 of them queue_full: "
                                  "the server is overloaded for this trace")
    assert main(["replay", str(trace), "--constant-cost", "1", "--max-batch", "1",
                 "--max-waiting", "10", "--quiet"]) == 0
    assert "refused or dropped" not in capsys.readouterr().out
