"""The optional `key` of a trace request (the name of the API key it comes with):
read and written as an optional field, a bad name a line-numbered error, and keys
with a few heavy users given to a trace by `assign_keys` and the command line."""
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from traces import (SAMPLES_DIR, Client, ClientMix, TraceError, TraceRequest, generate,
                    load_trace, read_trace, write_trace)
from traces.shaping import assign_keys

ROOT = Path(__file__).resolve().parents[2]
VALID = '{"id": "a", "arrival_s": 0.5, "prompt_tokens": 10, "max_new_tokens": 20}'
MANY = [TraceRequest(str(i), i * 0.01, 10 + i % 7, 5 + i % 3) for i in range(2000)]


def run_traces(*args):
    return subprocess.run([sys.executable, "-m", "traces", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_a_key_goes_round_the_file_after_the_other_fields(tmp_path):
    requests = [TraceRequest("a", 0.0, 10, 20, key="team-a.prod_1"),
                TraceRequest("b", 0.5, 7, 3, client=Client(leave_after_tokens=2), key="K" * 64),
                TraceRequest("c", 1.0, 4, 4)]
    path = tmp_path / "t.jsonl"
    write_trace(path, requests)
    assert read_trace(path) == requests
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"id": "a", "arrival_s": 0.0, "prompt_tokens": 10, "max_new_tokens": 20,
         "key": "team-a.prod_1"},
        {"id": "b", "arrival_s": 0.5, "prompt_tokens": 7, "max_new_tokens": 3,
         "client": {"leave_after_tokens": 2}, "key": "K" * 64},
        {"id": "c", "arrival_s": 1.0, "prompt_tokens": 4, "max_new_tokens": 4},
    ]


def test_a_null_key_reads_as_none(tmp_path):
    [r] = read_lines(tmp_path, VALID[:-1] + ', "key": null}')
    assert r.key is None and r == TraceRequest("a", 0.5, 10, 20)


@pytest.mark.parametrize("sample", ["azure_conv_200.jsonl", "mixed.jsonl", "calibration.jsonl"])
def test_traces_without_keys_are_written_byte_for_byte_as_before(tmp_path, sample):
    path = tmp_path / sample
    write_trace(path, read_trace(SAMPLES_DIR / sample))
    assert path.read_bytes() == (SAMPLES_DIR / sample).read_bytes()


@pytest.mark.parametrize("value", ['""', '"a b"', '"' + "k" * 65 + '"', '"key/1"', '"ключ"',
                                   '"key\\n"', "7", "true", '["k"]'])
def test_a_bad_key_is_an_error_naming_the_line_and_the_field(tmp_path, value):
    with pytest.raises(TraceError) as caught:
        read_lines(tmp_path, VALID, "", '{"id": "b", "arrival_s": 1, "prompt_tokens": 1, '
                                        f'"max_new_tokens": 3, "key": {value}}}')
    assert str(caught.value).startswith(
        "trace.jsonl line 3: field 'key' must be a key name (1 to 64 letters, digits, "
        "'.', '_' or '-') or null, got ")


def test_the_writer_refuses_a_bad_key_and_writes_nothing(tmp_path):
    path = tmp_path / "t.jsonl"
    with pytest.raises(TraceError, match="line 2 .*field 'key' must be a key name"):
        write_trace(path, [TraceRequest("a", 0.0, 5, 5, key="ok"),
                           TraceRequest("b", 1.0, 5, 5, key="not ok")])
    assert not path.exists()


def test_keys_are_zipf_like_a_few_heavy_ones_carry_most():
    keyed = assign_keys(MANY, 10, skew=1.2, seed=3)
    counts = Counter(r.key for r in keyed)
    assert set(counts) == {f"key-{i}" for i in range(10)}
    # Weights 1/(i+1)^1.2 give key-0 40.5% and the first three 68.9%; a fair share is 10%.
    [(heaviest, most)] = counts.most_common(1)
    assert heaviest == "key-0" and 0.36 < most / len(MANY) < 0.45
    top3 = sum(n for _, n in counts.most_common(3))
    assert 0.64 < top3 / len(MANY) < 0.74
    assert counts["key-0"] > counts["key-1"] > counts["key-2"] > counts["key-9"]


def test_skew_zero_spreads_the_keys_evenly():
    counts = Counter(r.key for r in assign_keys(MANY, 10, skew=0.0, seed=3))
    assert max(counts.values()) / len(MANY) < 0.13 and min(counts.values()) / len(MANY) > 0.07


def test_keys_follow_the_seed_and_leave_the_rest_of_each_request_alone():
    keyed = assign_keys(MANY, 10, skew=1.2, seed=3)
    assert keyed == assign_keys(MANY, 10, skew=1.2, seed=3)
    assert [r.key for r in keyed] != [r.key for r in assign_keys(MANY, 10, skew=1.2, seed=4)]
    assert [TraceRequest(**_fields(r) | {"key": None}) for r in keyed] == MANY
    assert {r.key for r in assign_keys(MANY[:50], 1, seed=3)} == {"key-0"}


@pytest.mark.parametrize("keys, skew, problem", [
    (0, 1.0, "keys must be a positive number of keys, got 0"),
    (5, -0.5, "key skew must be a number >= 0, got -0.5"),
    (5, float("nan"), "key skew must be a number >= 0, got nan"),
])
def test_bad_key_options_are_refused(keys, skew, problem):
    with pytest.raises(TraceError, match=problem):
        assign_keys(MANY, keys, skew)


def test_convert_and_generate_give_keys_as_the_function_does(tmp_path):
    source = tmp_path / "conv.csv"
    source.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{i:02d}.0,{100 + i},{10 + i}\n" for i in range(40)))
    out = tmp_path / "keyed.jsonl"
    done = run_traces("convert", source, "--keys", 4, "--key-skew", 2, "--seed", 7, "-o", out)
    assert done.returncode == 0, done.stderr
    assert read_trace(out) == assign_keys(load_trace(source), 4, 2.0, 7)

    generated = tmp_path / "generated.jsonl"
    done = run_traces("generate", "--rate", 5, "--count", 30, "--leave", 0.1,
                      "--leave-after-tokens", 3, "--keys", 3, "-o", generated)
    assert done.returncode == 0, done.stderr
    expected = generate(rate=5, count=30, clients=ClientMix(leave=0.1, leave_after_tokens=3))
    assert read_trace(generated) == assign_keys(expected, 3, 1.0, 0)
    # Keys do not change what else the seed drew.
    assert [_fields(r) | {"key": None} for r in read_trace(generated)] == [
        _fields(r) for r in expected]


def test_a_key_skew_without_keys_is_refused(tmp_path):
    done = run_traces("generate", "--rate", 5, "--count", 3, "--key-skew", 2,
                      "-o", tmp_path / "g.jsonl")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "python -m traces generate: error: --key-skew applies only with --keys")


def read_lines(folder: Path, *lines: str) -> list[TraceRequest]:
    path = folder / "trace.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return read_trace(path)


def _fields(r: TraceRequest) -> dict:
    return {name: getattr(r, name) for name in r.__slots__}
