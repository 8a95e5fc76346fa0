"""C++ kernels for the CPU, compiled for this machine the first time they are asked
for and kept in the local cache (`models.cache_root()`), then loaded with ctypes.

A build is a shared library without torch's headers (about a second to compile),
made for the host's instruction set (`-march=native`) and keyed by everything it
depends on: the source and its headers, the compile-time constants, the compiler
and the CPU. It links the OpenMP runtime by its soname, which torch has loaded
already, so its parallel loops share torch's threads rather than start a second
pool."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..models import cache_root

COMPILE_FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-ffast-math", "-fopenmp",
                 "-fPIC", "-std=c++17")
# gcc otherwise keeps to 256-bit vectors on CPUs that have 512: the activation's
# exp ran a quarter faster with 512.
# Linked without -ffast-math: with it gcc adds a start-up routine that sets
# flush-to-zero for the whole process, which would change torch's own float32 results.
LINK_FLAGS = ("-shared", "-fopenmp")


class NativeBuildError(RuntimeError):
    """No C++ compiler, or the source did not compile on this machine."""


def compiler() -> str:
    found = shutil.which(os.environ.get("CXX", "g++"))
    if found is None:
        raise NativeBuildError(f"no C++ compiler ({os.environ.get('CXX', 'g++')}) on the PATH")
    return found


def load_kernel(source: Path, defines: dict[str, int]) -> ctypes.CDLL:
    """The library built from `source` with `defines` (`-DNAME=VALUE`), building it
    on first use."""
    cxx = compiler()
    try:
        # the headers beside it are part of every source (included with quotes)
        text = b"".join(path.read_bytes() for path in [source, *sorted(source.parent.glob("*.h"))])
    except OSError as exc:
        raise NativeBuildError(f"the kernel source {source} is missing: {exc}") from exc
    macros = tuple(f"-D{name}={value}" for name, value in sorted(defines.items()))
    key = hashlib.sha256()
    for part in (text, "\0".join(COMPILE_FLAGS + LINK_FLAGS + macros).encode(),
                 _compiler_identity(cxx), _cpu_identity()):
        key.update(part)
        key.update(b"\0")
    target = cache_root() / "kernels" / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if not target.is_file():
        _build(cxx, source, macros, target)
    return ctypes.CDLL(str(target))


def _build(cxx: str, source: Path, macros: tuple[str, ...], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the target and renamed in one step: a build another process
    # runs at the same time, or one interrupted, never leaves half a library there.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.stem}-") as work:
        obj, lib = Path(work) / "kernel.o", Path(work) / "kernel.so"
        for command in ([cxx, *COMPILE_FLAGS, *macros, "-c", str(source), "-o", str(obj)],
                        [cxx, *LINK_FLAGS, str(obj), "-o", str(lib)]):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise NativeBuildError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")
        os.replace(lib, target)


@functools.cache
def _compiler_identity(cxx: str) -> bytes:
    return subprocess.run([cxx, "--version"], capture_output=True, check=True).stdout


@functools.cache
def _cpu_identity() -> bytes:
    """What `-march=native` compiles for: the CPU's model and instruction set."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}".encode()
    wanted = ("model name", "flags")
    return "\n".join(dict.fromkeys(l for l in lines if l.startswith(wanted))).encode()
