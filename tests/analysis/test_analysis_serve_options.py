"""The settings `python -m analysis` starts a server with, as `python -m live serve`
flags, and the combinations it refuses before starting anything."""
import subprocess
import sys

import pytest

from analysis.serve_options import BadServeOptions, ServeOptions


def flag_values(args: list[str]) -> dict[str, str | None]:
    out, i = {}, 0
    while i < len(args):
        takes_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        out[args[i]] = args[i + 1] if takes_value else None
        i += 2 if takes_value else 1
    return out


def test_the_cpu_default_gives_a_pool_of_blocks():
    flags = flag_values(ServeOptions(threads=1).serve_args())
    assert flags["--num-blocks"] == "1024" and flags["--device"] == "cpu"
    assert "--gpu-memory-fraction" not in flags and "--eager" not in flags
    assert "--max-prefill-tokens" not in flags
    assert flag_values(ServeOptions(max_prefill_tokens=512).serve_args())["--max-prefill-tokens"] == "512"
    assert flags["--admission"] == "reserve"
    assert flag_values(ServeOptions(admission="optimistic").serve_args())["--admission"] == "optimistic"
    assert "--chunked-prefill" not in flags
    chunked = flag_values(ServeOptions(max_prefill_tokens=64, chunked_prefill=True).serve_args())
    assert "--chunked-prefill" in chunked and chunked["--max-prefill-tokens"] == "64"


def test_on_cuda_the_pool_may_be_sized_from_memory_and_graphs_turned_off():
    options = ServeOptions(device="cuda", dtype="bfloat16", num_blocks=None,
                           gpu_memory_fraction=0.5, eager=True, threads=None)
    flags = flag_values(options.serve_args())
    assert flags["--gpu-memory-fraction"] == "0.5" and "--eager" in flags
    assert "--num-blocks" not in flags and "--threads" not in flags


@pytest.mark.parametrize("options, message", [
    (dict(gpu_memory_fraction=0.5, num_blocks=None), "the device is cpu"),
    (dict(device="cuda", gpu_memory_fraction=0.5), "not both"),
    (dict(admission="lazy"), "--admission lazy: known policies are optimistic, reserve"),
    (dict(chunked_prefill=True), "chunks of --max-prefill-tokens; give that too"),
])
def test_settings_that_cannot_go_together_are_refused(options, message):
    with pytest.raises(BadServeOptions, match=message):
        ServeOptions(**options)


def test_the_command_line_refuses_them_before_starting_a_server(tmp_path):
    out = subprocess.run([sys.executable, "-m", "analysis", "calibrate", "--gpu-memory-fraction",
                          "0.5", "--out", str(tmp_path / "cal")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "sizes the KV pool of a CUDA device; the device is cpu" in out.stderr
    assert not (tmp_path / "cal").exists()
