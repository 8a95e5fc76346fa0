"""The same trace and seed give byte-identical result files from two runs of the
command line; a different seed, where the seed picks the trace, gives different ones."""
import subprocess
import sys
from pathlib import Path

from traces import SAMPLES_DIR
from traces.outcome import read_outcomes

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ("outcomes.parquet", "summary.json", "timeseries.npy")


def cli(package, *args):
    result = subprocess.run([sys.executable, "-m", package, *map(str, args)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def results(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in RESULTS}


def assert_depends_on_seed_alone(run, seed: int, other_seed: int) -> None:
    """`run(seed, name)` gives the same files twice for one seed, others for another."""
    first = run(seed, "a")
    assert run(seed, "b") == first
    other = run(other_seed, "c")
    assert other["outcomes.parquet"] != first["outcomes.parquet"]
    assert other["summary.json"] != first["summary.json"]


def test_slow_readers_and_leavers_replay_byte_for_byte(tmp_path):
    # 8 slow readers and 6 leavers; small connections and a tight policy, so pauses,
    # drops and cancels all happen, on the shipped CPU profile.
    options = ["--policy", "pause_then_drop", "--max-queued", 2, "--stall-timeout-s", 0.15,
               "--transport-bytes", 512, "--max-batch", 4, "--num-blocks", 64]
    for run in ("first", "second"):
        cli("sim", "replay", SAMPLES_DIR / "mixed.jsonl", *options, "--out", tmp_path / run)
    first = results(tmp_path / "first")
    assert first == results(tmp_path / "second")
    assert (tmp_path / "first" / "setup.json").read_bytes() == \
        (tmp_path / "second" / "setup.json").read_bytes()
    reasons = {o.finish_reason for o in read_outcomes(tmp_path / "first" / "outcomes.parquet")}
    assert {"slow_client", "cancelled"} <= reasons


def test_a_sampled_trace_depends_on_its_seed_alone(tmp_path):
    def replay_sample(seed, out):
        cli("sim", "replay", SAMPLES_DIR / "azure_conv_200.jsonl", "--sample", 0.3, "--seed", seed,
            "--max-prompt-tokens", 1500, "--max-new-tokens", 64, "--out", tmp_path / out)
        return results(tmp_path / out)

    assert_depends_on_seed_alone(replay_sample, 1, 2)


def test_a_generated_trace_depends_on_its_seed_alone(tmp_path):
    def generate_and_replay(seed, name):
        trace = tmp_path / f"{name}.jsonl"
        cli("traces", "generate", "--rate", 4, "--count", 60, "--arrivals", "gamma", "--cv", 2,
            "--prompt-len", "lognormal:64:0.6", "--output-len", "uniform:8:48", "--slow", 0.2,
            "--slow-pause-s", 0.3, "--leave", 0.2, "--leave-after-tokens", 5, "--seed", seed,
            "-o", trace)
        cli("sim", "replay", trace, "--policy", "pause", "--max-queued", 2,
            "--transport-bytes", 512, "--out", tmp_path / name)
        return results(tmp_path / name)

    assert_depends_on_seed_alone(generate_and_replay, 5, 6)
