"""The native JSONL trace format: round trips, defaults, and errors that name the
line and the field."""
import json

import pytest

from traces import Client, LeaveHow, ReadMode, TraceError, TraceRequest, read_trace, write_trace
from traces.jsonl import count_requests, iter_trace

VALID = '{"id": "a", "arrival_s": 0.5, "prompt_tokens": 10, "max_new_tokens": 20}'


def write_lines(tmp_path, *lines, name="trace.jsonl"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_round_trip_keeps_every_field(tmp_path):
    requests = [
        TraceRequest("a", 0.0, 10, 20),
        TraceRequest("b", 0.25, 7, 3, prompt="Hello there", temperature=0.7, top_p=0.9, top_k=40,
                     seed=11, ignore_eos=False),
        TraceRequest("c", 0.25, 300, 64, client=Client(read=ReadMode.PER_EVENT, pause_s=0.2,
                                                       leave_after_tokens=12, leave_how=LeaveHow.RST)),
        TraceRequest("d", 3.5, 1, 1, client=Client(read=ReadMode.BYTE_RATE, bytes_per_s=512.0,
                                                   leave_after_s=1.5)),
    ]
    path = tmp_path / "t.jsonl"
    write_trace(path, requests)
    assert read_trace(path) == requests


def test_writer_leaves_out_defaults(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, [TraceRequest("a", 1.0, 10, 20),
                       TraceRequest("b", 2.0, 5, 6, client=Client(leave_after_tokens=3))])
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"id": "a", "arrival_s": 1.0, "prompt_tokens": 10, "max_new_tokens": 20},
        {"id": "b", "arrival_s": 2.0, "prompt_tokens": 5, "max_new_tokens": 6,
         "client": {"leave_after_tokens": 3}},
    ]


def test_omitted_fields_take_the_defaults(tmp_path):
    path = write_lines(tmp_path, '{"id": "x", "arrival_s": 2, "prompt_tokens": 4, "max_new_tokens": 8}')
    [r] = read_trace(path)
    assert r == TraceRequest("x", 2.0, 4, 8)
    assert r.prompt is None and r.ignore_eos and r.client == Client()
    assert isinstance(r.arrival_s, float)


def test_blank_lines_are_allowed_and_empty_file_is_no_requests(tmp_path):
    assert [r.id for r in read_trace(write_lines(tmp_path, "", VALID, "   "))] == ["a"]
    assert read_trace(write_lines(tmp_path, name="empty.jsonl")) == []


@pytest.mark.parametrize("line, problem", [
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 10, "max_new_tokens": -3}',
     "field 'max_new_tokens' must be a positive integer, got -3"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 2.0, "max_new_tokens": 3}',
     "field 'prompt_tokens' must be a positive integer, got 2.0"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": true, "max_new_tokens": 3}',
     "field 'prompt_tokens' must be a positive integer, got true"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 10}', "field 'max_new_tokens' is required"),
    ('{"id": 7, "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3}',
     "field 'id' must be a non-empty string, got 7"),
    ('{"id": "b", "arrival_s": -1, "prompt_tokens": 1, "max_new_tokens": 3}',
     "field 'arrival_s' must be a non-negative number, got -1"),
    ('{"id": "b", "arrival_s": NaN, "prompt_tokens": 1, "max_new_tokens": 3}',
     "field 'arrival_s' must be a non-negative number, got NaN"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "top_p": 0}',
     "field 'top_p' must be a number in (0, 1], got 0"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "ignore_eos": 1}',
     "field 'ignore_eos' must be true or false, got 1"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_token": 3, "max_new_tokens": 3}',
     "field 'max_new_token' is not a trace field (did you mean 'max_new_tokens'?)"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "client": {"read": "slow"}}',
     """field 'client.read' must be one of "instant", "per_event", "byte_rate", got "slow\""""),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "client": {"pause": 1}}',
     "field 'client.pause' is not a trace field (did you mean 'client.pause_s'?)"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "client": {"read": "per_event"}}',
     """field 'client.pause_s' must be positive when client.read is "per_event\""""),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "client": {"pause_s": 0.1}}',
     """field 'client.pause_s' applies only when client.read is "per_event\""""),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "client": {"read": "byte_rate"}}',
     """field 'client.bytes_per_s' must be positive when client.read is "byte_rate\""""),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "client": {"leave_how": "rst"}}',
     "field 'client.leave_how' applies only to a client that leaves"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3, "client": "slow"}',
     """field 'client' must be an object, got "slow\""""),
    ('{"id": "a", "arrival_s": 1, "prompt_tokens": 1, "max_new_tokens": 3}',
     """field 'id' "a" already used on line 1"""),
    ('{"id": "b", "arrival_s": 0.1, "prompt_tokens": 1, "max_new_tokens": 3}',
     "field 'arrival_s' is 0.1, earlier than the line before (0.5)"),
    ('[1, 2]', "a request must be a JSON object, got [1, 2]"),
    ('{"id": "b", "arrival_s": 1,', "not valid JSON"),
])
def test_errors_name_the_line_and_the_field(tmp_path, line, problem):
    # The bad request is on line 3: line 2 is blank, and blank lines still count.
    path = write_lines(tmp_path, VALID, "", line)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert str(caught.value).startswith("trace.jsonl line 3: ")
    assert problem in str(caught.value)


def test_trace_error_is_a_value_error():
    assert issubclass(TraceError, ValueError)


def test_writer_refuses_what_the_reader_would_refuse_and_writes_nothing(tmp_path):
    path = tmp_path / "t.jsonl"
    with pytest.raises(TraceError, match="field 'prompt_tokens' must be a positive integer, got 0"):
        write_trace(path, [TraceRequest("a", 0.0, 5, 5), TraceRequest("b", 1.0, 0, 5)])
    with pytest.raises(TraceError, match="field 'id' \"a\" already used on line 1"):
        write_trace(path, [TraceRequest("a", 0.0, 5, 5), TraceRequest("a", 1.0, 5, 5)])
    with pytest.raises(TraceError, match="client.pause_s"):
        write_trace(path, [TraceRequest("a", 0.0, 5, 5, client=Client(pause_s=0.5))])
    assert not path.exists()


def test_a_trace_read_a_request_at_a_time_is_the_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "arrival_s": 0, "prompt_tokens": 3, "max_new_tokens": 2}\n\n'
                    '{"id": "b", "arrival_s": 1, "prompt_tokens": 4, "max_new_tokens": 1}\n'
                    '{"id": "a", "arrival_s": 2, "prompt_tokens": 5, "max_new_tokens": 1}\n')
    with pytest.raises(TraceError, match="already used on line 1"):
        read_trace(path)
    assert [r.id for r in iter_trace(path, unique_ids=False)] == ["a", "b", "a"]
    assert count_requests(path) == 3
