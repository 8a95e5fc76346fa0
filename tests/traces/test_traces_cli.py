"""`python -m traces`: generate, convert and stats as a user runs them, and one-line
errors with a non-zero exit for bad input."""
import subprocess
import sys
from pathlib import Path

from traces import ClientMix, Fixed, LeaveHow, Uniform, generate, read_trace

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "traces", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_generate_then_stats(tmp_path):
    out = tmp_path / "g.jsonl"
    done = run("generate", "--rate", 4, "--count", 30, "--arrivals", "gamma", "--cv", 1.5,
               "--prompt-len", "uniform:8:32", "--output-len", "fixed:16",
               "--slow", 0.2, "--slow-pause-s", 0.1, "--leave", 0.1, "--leave-after-tokens", 5,
               "--leave-how", "rst", "--seed", 5, "-o", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote 30 requests to {out}"
    # The command line makes exactly what the API makes from the same arguments.
    assert read_trace(out) == generate(
        rate=4, count=30, cv=1.5, prompt_lengths=Uniform(8, 32), output_lengths=Fixed(16),
        clients=ClientMix(slow=0.2, slow_pause_s=0.1, leave=0.1, leave_after_tokens=5,
                          leave_how=LeaveHow.RST), seed=5)

    stats = run("stats", out)
    assert stats.returncode == 0, stats.stderr
    lines = stats.stdout.splitlines()
    assert lines[0] == "requests        30"
    assert "slow_fraction   0.200" in lines and "leave_fraction  0.100" in lines
    assert lines[-1].split() == ["output", "16.0", "16.0", "16.0", "16.0", "16"]


def test_generate_caps_lengths(tmp_path):
    out = tmp_path / "g.jsonl"
    done = run("generate", "--rate", 10, "--duration-s", 5, "--prompt-len", "lognormal:200:1",
               "--max-prompt-tokens", 300, "--max-new-tokens", 8, "-o", out)
    assert done.returncode == 0, done.stderr
    requests = read_trace(out)
    assert max(r.prompt_tokens for r in requests) <= 300
    assert {r.max_new_tokens for r in requests} == {8}


def test_convert_with_loader_options(tmp_path):
    source = tmp_path / "conv.csv"
    source.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,3000,44\n"
                      "2023-11-16 18:15:50.0,396,109\n2023-11-16 18:15:51.0,10,10\n")
    out = tmp_path / "out.jsonl"
    done = run("convert", source, "--limit", 2, "--time-scale", 0.5, "--max-prompt-tokens", 2000,
               "-o", out)
    assert done.returncode == 0, done.stderr
    assert [(r.id, r.arrival_s, r.prompt_tokens, r.max_new_tokens) for r in read_trace(out)] == [
        ("0", 0.0, 2000, 44), ("1", 2.0, 396, 109)]


def assert_one_line_error(done, code, *fragments):
    assert done.returncode == code
    assert "Traceback" not in done.stderr
    if code == 1:  # a bad file or value; 2 is argparse's usage message
        assert len(done.stderr.strip().splitlines()) == 1
    for fragment in fragments:
        assert fragment in done.stderr


def test_user_errors_are_one_line_without_traceback(tmp_path):
    out = tmp_path / "x.jsonl"
    assert_one_line_error(run("generate", "--rate", 1, "--count", 3, "--prompt-len", "normal:5", "-o", out),
                          1, "python -m traces generate: error: length spec 'normal:5' is not one of")
    assert_one_line_error(run("generate", "--rate", 1, "--count", 3, "--arrivals", "gamma", "-o", out),
                          1, "--arrivals gamma needs --cv")
    assert_one_line_error(run("generate", "--rate", 1, "--count", 3, "--slow", 0.5, "-o", out),
                          1, "slow readers need exactly one of")
    assert_one_line_error(run("generate", "--rate", -1, "--count", 3, "-o", out), 1, "rate must be positive")
    assert not out.exists()
    assert_one_line_error(run("stats", tmp_path / "missing.jsonl"), 1, "No such file or directory")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "arrival_s": 0, "prompt_tokens": 5, "max_new_tokens": 0}\n')
    assert_one_line_error(run("stats", bad), 1,
                          "bad.jsonl line 1: field 'max_new_tokens' must be a positive integer, got 0")
    assert_one_line_error(run("convert", bad, "--model", "GPT-4", "-o", out), 1,
                          "option 'model' does not apply to native traces")
    assert_one_line_error(run("generate", "--count", 3, "-o", out), 2, "--rate")
