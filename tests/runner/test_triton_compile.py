"""The decode kernel compiled for real GPUs, with none present: the interpreter the
other kernel tests run in accepts what the compiler may refuse (shapes, types,
layouts), and only a compiled build shows its registers and spills. Builds for
Ampere (sm_80) and Hopper (sm_90), at the shapes of the models served (SmolLM2:
9 query heads on 3 KV heads of 64; GPT-2: 12 heads of 64), for every cache dtype."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
pytestmark = pytest.mark.skipif(not CUOBJDUMP.exists(), reason="triton without its CUDA tools")

SHAPES = {"smollm2": (9, 3, 64), "gpt2": (12, 12, 64)}
BUILDS = [(arch, dtype, model, block_size)
          for arch in (80, 90) for dtype in ("float32", "bfloat16", "float16")
          for model in SHAPES for block_size in (16, 32)]


@pytest.fixture(scope="module")
def builds() -> list[dict]:
    args = [str(a) for arch, dtype, model, block_size in BUILDS
            for a in (arch, dtype, *SHAPES[model], block_size)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "kernel_build.py"), *args],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_every_build_compiles_for_its_architecture(builds):
    assert [(b["arch"], b["dtype"], b["heads"], b["kv_heads"], b["block_size"]) for b in builds] == [
        (arch, dtype, *SHAPES[model][:2], block_size) for arch, dtype, model, block_size in BUILDS]


def test_no_build_spills_registers(builds):
    """A spill puts the online softmax's running state in local memory, read and
    written once per block of every context."""
    spilled = [b for b in builds if b["local"] or b["stack"]]
    assert not spilled, spilled
    assert all(0 < b["reg"] <= 255 for b in builds)
