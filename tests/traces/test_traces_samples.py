"""The sample traces shipped in traces/samples, and the real public traces in the
shared folder (skipped where it is missing)."""
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from traces import SAMPLES_DIR, Client, load_trace, read_trace

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="no shared traces folder")


def test_calibration_sample():
    requests = read_trace(SAMPLES_DIR / "calibration.jsonl")
    assert len(requests) == 40
    assert 15.0 <= requests[-1].arrival_s <= 25.0
    prompts = [r.prompt_tokens for r in requests]
    assert 8 <= min(prompts) <= 16 and 350 <= max(prompts) <= 400
    assert all(8 <= r.max_new_tokens <= 64 for r in requests)
    assert all(r.client == Client() and r.prompt is None for r in requests)


def test_mixed_sample_suits_a_small_cpu_model():
    requests = read_trace(SAMPLES_DIR / "mixed.jsonl")
    assert len(requests) == 40
    assert all(r.prompt_tokens <= 300 and r.max_new_tokens <= 64 for r in requests)
    assert sum(r.client.slow for r in requests) == 8
    leavers = [r for r in requests if r.client.leaves]
    assert len(leavers) == 6
    # Every leaver really leaves: before its last token.
    assert all(r.client.leave_after_tokens < r.max_new_tokens for r in leavers)


@needs_shared
@pytest.mark.parametrize("sample, source", [
    ("azure_conv_200.jsonl", "AzureLLMInferenceTrace_conv.csv"),
    ("mooncake_conversation_200.jsonl", "mooncake_conversation_trace.jsonl"),
])
def test_excerpts_are_the_first_rows_of_the_real_traces(sample, source):
    assert read_trace(SAMPLES_DIR / sample) == load_trace(SHARED / source, limit=200)


def _readme_commands():
    text = (SAMPLES_DIR / "README.md").read_text()
    return [shlex.split(line) for line in text.splitlines() if line.startswith("python -m traces ")]


def test_readme_commands_make_the_committed_samples(tmp_path):
    commands = _readme_commands()
    assert len(commands) == 4
    for words in commands:
        if any("../shared" in w for w in words) and not SHARED.is_dir():
            continue
        target = words[words.index("-o") + 1]
        words[words.index("-o") + 1] = str(tmp_path / "out.jsonl")
        done = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "out.jsonl").read_bytes() == (ROOT / target).read_bytes(), target


@needs_shared
def test_real_azure_traces_load():
    conv = load_trace(SHARED / "AzureLLMInferenceTrace_conv.csv")
    assert len(conv) == 19366
    assert [(r.id, r.arrival_s, r.prompt_tokens, r.max_new_tokens) for r in conv[:2]] == [
        ("0", 0.0, 374, 44), ("1", 4.314579, 396, 109)]
    assert conv[-1].arrival_s == pytest.approx(3501.721937)
    code = load_trace(SHARED / "AzureLLMInferenceTrace_code.csv", max_prompt_tokens=2000)
    assert len(code) == 8819 and max(r.prompt_tokens for r in code) == 2000


@needs_shared
def test_real_mooncake_trace_loads():
    requests = load_trace(SHARED / "mooncake_conversation_trace.jsonl")
    assert len(requests) == 12031
    assert (requests[0].arrival_s, requests[0].prompt_tokens, requests[0].max_new_tokens) == (0.0, 6758, 500)
    assert requests[-1].arrival_s == pytest.approx(3536.999)
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals)
