"""The live server as a separate process, the way a user runs it: its own
interpreter (so the load generator never shares its GIL), on 127.0.0.1 on a free
port, stopped with SIGINT for a graceful shutdown."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(serve_args: list[str], log_path: Path, start_timeout_s: float = 600.0):
    """Yield the base URL of `python -m live serve <serve_args>` once it is healthy."""
    port = free_port()
    cmd = [sys.executable, "-m", "live", "serve", "--host", "127.0.0.1", "--port", str(port),
           *serve_args]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc, log_path, start_timeout_s)
            yield url
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the live server exited with {proc.returncode}; see {log_path}:\n"
                               + Path(log_path).read_text()[-2000:])
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"the live server did not become healthy in {timeout_s:.0f} s; see {log_path}")
