"""Compiles the paged decode kernel to machine code for a GPU architecture, with no
GPU present, and prints one JSON line per build: its resource usage as the GPU's
own tools read it from the cubin. Run as a script with TRITON_INTERPRET unset:
the interpreter replaces the compiler in the process that chose it.

    python tests/kernel_build.py ARCH DTYPE HEADS KV_HEADS HEAD_DIM BLOCK_SIZE [...]"""
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from live.runner.triton_attention import NUM_WARPS, _paged_decode_kernel, kernel_constants

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
TYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def build(arch: int, dtype: str, heads: int, kv_heads: int, head_dim: int, block_size: int) -> dict:
    data = "*" + TYPES[dtype]
    signature = {"q_ptr": data, "k_ptr": data, "v_ptr": data, "out_ptr": data,
                 "tables_ptr": "*i32", "lens_ptr": "*i32", "scale": "fp32"}
    names = _paged_decode_kernel.arg_names
    strides = names[names.index("scale") + 1:names.index("GROUP")]
    signature |= {name: "i32" for name in strides}
    constants = kernel_constants(heads // kv_heads, head_dim, block_size)
    signature |= {name: "constexpr" for name in constants}
    kernel = triton.compile(ASTSource(_paged_decode_kernel, signature, constants),
                            target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": NUM_WARPS})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([CUOBJDUMP, "--dump-resource-usage", cubin.name],
                               capture_output=True, text=True, check=True).stdout
    line = next(l for l in usage.splitlines() if "REG:" in l)
    return {"arch": arch, "dtype": dtype, "heads": heads, "kv_heads": kv_heads,
            "head_dim": head_dim, "block_size": block_size,
            **{k.lower(): int(v) for k, v in re.findall(r"(\w+):(\d+)", line)}}


if __name__ == "__main__":
    args = sys.argv[1:]
    for i in range(0, len(args), 6):
        arch, dtype, *shape = args[i:i + 6]
        print(json.dumps(build(int(arch), dtype, *map(int, shape))), flush=True)
