"""Files no trace tool wrote: numbers too large for any clock or count, JSON nested
past what a parser can follow, numbers with more digits than Python reads. Each is
a `TraceError` that names the line, never an OverflowError or a RecursionError."""
import pytest

from traces import TraceError, load_trace

HEADER = '{"id": "a", "arrival_s": 0, "prompt_tokens": 4, "max_new_tokens": 2}\n'
HUGE = "1" + "0" * 400
DEEP = "[" * 100_000

NATIVE = [
    ('{"id": "b", "arrival_s": %s, "prompt_tokens": 4, "max_new_tokens": 2}' % HUGE,
     "arrival_s"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": %s, "max_new_tokens": 2}' % HUGE,
     "prompt_tokens"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 4, "max_new_tokens": 2, "temperature": %s}'
     % HUGE, "temperature"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 4, "max_new_tokens": 2, "top_p": %s}'
     % HUGE, "top_p"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 4, "max_new_tokens": 2, "seed": %s}'
     % HUGE, "seed"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 4, "max_new_tokens": 2, '
     '"client": {"read": "per_event", "pause_s": %s}}' % HUGE, "client.pause_s"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 4, "max_new_tokens": 2, "prompt": %s}'
     % ("[" * 400 + "]" * 400), "prompt"),
    (DEEP, "JSON"),
    ('{"id": "b", "arrival_s": 1, "prompt_tokens": 9%s}' % ("9" * 5000), "JSON"),
]


@pytest.mark.parametrize("line,named", NATIVE, ids=range(len(NATIVE)))
def test_native_lines_with_hostile_values_are_errors_naming_line_and_field(tmp_path, line, named):
    path = tmp_path / "t.jsonl"
    path.write_text(HEADER + line + "\n")
    with pytest.raises(TraceError) as err:
        load_trace(path)
    message = str(err.value)
    assert "t.jsonl line 2" in message and named in message
    assert len(message) < 500


def test_a_hostile_first_line_is_still_read_as_a_trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(DEEP + "\n")
    with pytest.raises(TraceError, match="t.jsonl line 1"):
        load_trace(path)


MOONCAKE = [
    '{"timestamp": %s, "input_length": 4, "output_length": 2}' % HUGE,
    '{"timestamp": 1, "input_length": %s, "output_length": 2}' % HUGE,
    '{"timestamp": 1e300, "input_length": 4, "output_length": 2}',
    '{"timestamp": 1, "input_length": 4, "output_length": 2, "hash_ids": %s}'
    % ("[" * 100_000),
]


@pytest.mark.parametrize("line", MOONCAKE, ids=range(len(MOONCAKE)))
def test_mooncake_lines_with_hostile_values_are_errors_naming_the_line(tmp_path, line):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n' + line + "\n")
    with pytest.raises(TraceError, match="m.jsonl line 2"):
        load_trace(path, format="mooncake")


@pytest.mark.parametrize("cell", ["1e300", "9" * 400])
def test_csv_counts_beyond_any_real_count_are_errors_naming_the_line(tmp_path, cell):
    path = tmp_path / "v.csv"
    path.write_text(f"num_prefill_tokens,num_decode_tokens\n4,2\n{cell},2\n")
    with pytest.raises(TraceError, match="v.csv line 3.*num_prefill_tokens"):
        load_trace(path)
