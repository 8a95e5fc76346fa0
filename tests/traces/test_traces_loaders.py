"""Loaders for public traces, each on a small file written here, checked record by
record; and the one entry point that tells the formats apart."""
import pytest

from traces import (TraceError, TraceRequest, detect_format, load_azure, load_burstgpt,
                    load_mooncake, load_trace, load_vidur, write_trace)
from traces.public.azure import timestamp_ns


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def summary(requests):
    return [(r.id, r.arrival_s, r.prompt_tokens, r.max_new_tokens) for r in requests]


AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:16:01.0000001,0,5
2023-11-16 18:17:00.1234567,12,0
2023-11-16 18:16:10.5,20,8
"""


def test_azure_rows_become_requests_in_time_order(tmp_path):
    requests = load_azure(write(tmp_path, "conv.csv", AZURE))
    # Rows 2 and 3 have a zero length and are skipped; row 4 is earlier than row 3.
    assert summary(requests) == [("0", 0.0, 374, 44), ("1", 4.314579, 396, 109),
                                 ("4", 23.81941, 20, 8)]
    assert all(r.ignore_eos and r.prompt is None for r in requests)


def test_time_zero_is_the_earliest_row_even_when_skipped(tmp_path):
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:15:40.0,10,0\n2023-11-16 18:15:42.25,10,3\n")
    assert summary(load_azure(path)) == [("1", 2.25, 10, 3)]


@pytest.mark.parametrize("a, b", [
    ("2023-11-16 18:15:46.6805900", "2023-11-16T18:15:46.68059Z"),
    ("2024-05-10 00:00:00.009930+00:00", "2024-05-10 00:00:00.00993"),
    ("2023-11-16 19:15:46+01:00", "2023-11-16 18:15:46"),
    ("2023-11-16 17:45:46-0030", "2023-11-16 18:15:46.000"),
    ("2023-11-16 18:15:46.123456789999", "2023-11-16 18:15:46.123456789"),
])
def test_azure_timestamps_in_any_spelling(a, b):
    assert timestamp_ns(a) == timestamp_ns(b) is not None


def test_azure_timestamps_are_exact_to_the_nanosecond():
    assert timestamp_ns("1970-01-01 00:00:01.0000001") == 1_000_000_100
    assert (timestamp_ns("2023-11-16 18:15:46.6805901") - timestamp_ns("2023-11-16 18:15:46.6805900")
            == 100)
    assert timestamp_ns("2023-13-01 00:00:00") is None
    assert timestamp_ns("yesterday") is None


@pytest.mark.parametrize("text, problem", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,1,1\nnot a time,3,4\n",
     "conv.csv line 3: column 'TIMESTAMP' must be a date and time like 2023-11-16 18:15:46.6805900, "
     'got "not a time"'),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,abc,1\n",
     "conv.csv line 2: column 'ContextTokens' must be a non-negative integer, got \"abc\""),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,1,2.5\n",
     "conv.csv line 2: column 'GeneratedTokens' must be a non-negative integer, got \"2.5\""),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,1\n",
     "conv.csv line 2: has 2 columns, the header has 3"),
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6,1\n",
     "conv.csv line 1: header lacks column 'GeneratedTokens'"),
])
def test_azure_errors_name_the_line_and_column(tmp_path, text, problem):
    with pytest.raises(TraceError) as caught:
        load_azure(write(tmp_path, "conv.csv", text))
    assert str(caught.value).startswith(problem)


BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
46.5,GPT-4,417,276,693,Conversation log
118,ChatGPT,1360,112,1472,API log
"""


def test_burstgpt_skips_failed_requests(tmp_path):
    requests = load_burstgpt(write(tmp_path, "burst.csv", BURSTGPT))
    assert summary(requests) == [("0", 0.0, 472, 18), ("2", 41.5, 417, 276), ("3", 113.0, 1360, 112)]


def test_burstgpt_filters_keep_the_file_timeline(tmp_path):
    path = write(tmp_path, "burst.csv", BURSTGPT)
    assert summary(load_burstgpt(path, model="GPT-4")) == [("2", 41.5, 417, 276)]
    assert summary(load_burstgpt(path, log_type="API log")) == [("3", 113.0, 1360, 112)]
    assert summary(load_burstgpt(path, model="ChatGPT", log_type="Conversation log")) == [
        ("0", 0.0, 472, 18)]
    assert load_burstgpt(path, model="chatgpt") == []


MOONCAKE = """{"timestamp": 1000, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}
{"timestamp": 1500, "input_length": 100, "output_length": 0, "hash_ids": []}

{"timestamp": 3250, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42]}
"""


def test_mooncake_milliseconds_become_seconds(tmp_path):
    assert summary(load_mooncake(write(tmp_path, "m.jsonl", MOONCAKE))) == [
        ("0", 0.0, 6758, 500), ("2", 2.25, 2290, 316)]


@pytest.mark.parametrize("line, problem", [
    ('{"timestamp": 5, "input_length": 3}', "m.jsonl line 2: field 'output_length' is missing"),
    ('{"timestamp": 5, "input_length": -3, "output_length": 1}',
     "m.jsonl line 2: field 'input_length' must be a non-negative integer, got -3"),
    ('{"timestamp": "soon", "input_length": 3, "output_length": 1}',
     "m.jsonl line 2: field 'timestamp' must be a non-negative integer, got \"soon\""),
    ('{"timestamp": 5', "m.jsonl line 2: not valid JSON"),
])
def test_mooncake_errors_name_the_line_and_field(tmp_path, line, problem):
    path = write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1}\n' + line)
    with pytest.raises(TraceError) as caught:
        load_mooncake(path)
    assert str(caught.value).startswith(problem)


def test_vidur_with_arrivals(tmp_path):
    path = write(tmp_path, "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                    "0.0,100,20\n0.75,2000.0,5\n1.5,0,5\n")
    assert summary(load_vidur(path)) == [("0", 0.0, 100, 20), ("1", 0.75, 2000, 5)]
    with pytest.raises(TraceError, match="rate applies only to length-only files"):
        load_vidur(path, rate=2.0)


def test_vidur_length_only_arrives_all_at_once_without_a_rate(tmp_path):
    path = write(tmp_path, "v.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens\n"
                                    "100,20,120\n50,0,50\n7,3,10\n")
    assert summary(load_vidur(path)) == [("0", 0.0, 100, 20), ("2", 0.0, 7, 3)]


def test_vidur_length_only_gets_seeded_poisson_arrivals(tmp_path):
    rows = "".join(f"{10 + i % 50},{1 + i % 7}\n" for i in range(2000))
    path = write(tmp_path, "v.csv", "num_prefill_tokens,num_decode_tokens\n" + rows)
    a = load_vidur(path, rate=10.0, seed=1)
    assert a == load_vidur(path, rate=10.0, seed=1)
    assert [r.arrival_s for r in a] != [r.arrival_s for r in load_vidur(path, rate=10.0, seed=2)]
    arrivals = [r.arrival_s for r in a]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert (len(a) - 1) / arrivals[-1] == pytest.approx(10.0, rel=0.1)
    assert [(r.prompt_tokens, r.max_new_tokens) for r in a[:3]] == [(10, 1), (11, 2), (12, 3)]


def test_load_trace_tells_the_formats_apart(tmp_path):
    native = tmp_path / "n.jsonl"
    write_trace(native, [TraceRequest("x", 0.0, 3, 4)])
    files = {
        "azure": write(tmp_path, "a.csv", AZURE),
        "burstgpt": write(tmp_path, "b.csv", BURSTGPT),
        "mooncake": write(tmp_path, "m.jsonl", MOONCAKE),
        "vidur": write(tmp_path, "v.csv", "num_prefill_tokens,num_decode_tokens\n3,4\n"),
        "native": native,
    }
    for name, path in files.items():
        assert detect_format(path) == name
    assert summary(load_trace(files["azure"])) == summary(load_azure(files["azure"]))
    assert summary(load_trace(files["native"])) == [("x", 0.0, 3, 4)]
    # Content decides when the extension says nothing.
    assert detect_format(write(tmp_path, "b.txt", BURSTGPT)) == "burstgpt"
    assert detect_format(write(tmp_path, "m.log", MOONCAKE)) == "mooncake"


def test_load_trace_passes_options_and_refuses_those_that_do_not_apply(tmp_path):
    path = write(tmp_path, "b.csv", BURSTGPT)
    assert summary(load_trace(path, model="ChatGPT", time_scale=0.5, max_prompt_tokens=1000)) == [
        ("0", 0.0, 472, 18), ("3", 56.5, 1000, 112)]
    with pytest.raises(TraceError, match="option 'model' does not apply to azure traces"):
        load_trace(write(tmp_path, "a.csv", AZURE), model="GPT-4")
    with pytest.raises(TraceError, match="unknown trace format 'sharegpt'"):
        load_trace(path, format="sharegpt")
    with pytest.raises(TraceError, match="x.csv: not a known trace format"):
        load_trace(write(tmp_path, "x.csv", "a,b\n1,2\n"))
