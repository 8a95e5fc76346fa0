"""The live side of a comparison takes what the engine made for each request from
the server's records of this run alone, and says which accepted requests it has
no record of."""
import pytest

from analysis.compare import add_engine_view
from live.streams.request_log import FIELDS
from traces.outcome import RequestOutcome

STARTED = 1_700_000_000.0
PREFIX = "twin-ab12cd34-"


def record(n: int, rid: str, **fields) -> dict:
    base = dict(n=n, id=rid, prompt_tokens=4, arrival_unix=STARTED + 0.1,
                admitted_unix=STARTED + 0.2, first_token_unix=STARTED + 0.3,
                finish_unix=STARTED + 0.9, finish_reason="length", completion_tokens=8,
                tokens_after_leave=0, left_unix=None, preemptions=0, recomputed_tokens=0,
                key=None)
    assert set(base) == set(FIELDS)
    return base | fields


def test_records_of_this_run_fill_in_the_engine_view():
    outcomes = [RequestOutcome("a", 0.1, 4, 8), RequestOutcome("b", 0.1, 4, 8, left_s=0.5),
                RequestOutcome("c", 0.1, 4, 8, refused="429 waiting queue full"),
                RequestOutcome("d", 0.1, 40, 8, left_s=0.4)]
    records = [
        record(1, PREFIX + "a"),
        record(2, PREFIX + "b", finish_reason="cancelled", admitted_unix=None,
               first_token_unix=None, completion_tokens=5, tokens_after_leave=2,
               left_unix=STARTED + 0.5),
        # admitted, and gone before its first token (its prompt was prefilled in chunks)
        record(5, PREFIX + "d", finish_reason="cancelled", first_token_unix=None,
               completion_tokens=0, left_unix=STARTED + 0.4),
        # the same trace id sent by another run or client: not this run's
        record(3, "twin-ffffffff-a", completion_tokens=99, tokens_after_leave=7),
        record(4, "a", completion_tokens=99, tokens_after_leave=7),
    ]
    assert add_engine_view(outcomes, records, PREFIX, STARTED) == []
    a, b, c, d = outcomes
    assert (a.tokens_generated, a.tokens_after_leave) == (8, 0)
    assert (a.admitted_s, a.first_token_engine_s) == pytest.approx((0.2, 0.3))
    assert (b.tokens_generated, b.tokens_after_leave) == (5, 2)
    assert (b.admitted_s, b.first_token_engine_s) == (None, None)
    assert (c.tokens_generated, c.tokens_after_leave, c.admitted_s) == (0, 0, None)
    assert (d.admitted_s, d.first_token_engine_s, d.tokens_generated) == (pytest.approx(0.2), None, 0)


def test_an_accepted_request_without_a_record_is_named():
    outcomes = [RequestOutcome("a", 0.0, 4, 8), RequestOutcome("gone", 0.0, 4, 8),
                RequestOutcome("refused", 0.0, 4, 8, refused="503 shutting down")]
    assert add_engine_view(outcomes, [record(1, PREFIX + "a")], PREFIX, STARTED) == ["gone"]
    assert outcomes[1].tokens_generated == 0


def test_a_broken_stream_the_server_dropped_as_slow_is_a_drop():
    # a cut slow reader sees its connection break ("error"); another error stays one
    outcomes = [RequestOutcome("cut", 0.0, 4, 8, finish_reason="error"),
                RequestOutcome("failed", 0.0, 4, 8, finish_reason="error")]
    records = [record(1, PREFIX + "cut", finish_reason="slow_client", completion_tokens=3),
               record(2, PREFIX + "failed", finish_reason="error", completion_tokens=2)]
    assert add_engine_view(outcomes, records, PREFIX, STARTED) == []
    assert [o.finish_reason for o in outcomes] == ["slow_client", "error"]
    assert [o.tokens_generated for o in outcomes] == [3, 2]
