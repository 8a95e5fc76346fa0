"""A server in its own process, the way a user starts one: `python -m live serve`
(or another server program) on a free port of 127.0.0.1, waited for until `/health`
answers, and stopped with a signal for a graceful shutdown, killed if that takes
longer than its grace. Its own interpreter means a client here never shares its GIL."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

LIVE_SERVE = ("-m", "live", "serve")


@dataclass
class Launched:
    process: subprocess.Popen
    """Its output goes to the log file, or to `process.stdout` (text) without one."""
    port: int
    log: Path | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        """What it has written, once it has exited."""
        return self.log.read_text() if self.log is not None else self.process.stdout.read()

    def stop(self, stop_signal: signal.Signals = signal.SIGINT, grace_s: float = 60.0) -> int:
        """Ask it to shut down; kill it if it is still running after `grace_s`."""
        if self.process.poll() is None:
            self.process.send_signal(stop_signal)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launched(args: Sequence[str] = (), *, program: Sequence[str] = LIVE_SERVE,
             log: Path | None = None, start_timeout_s: float = 600.0,
             stop_signal: signal.Signals = signal.SIGINT, grace_s: float = 60.0,
             cwd: Path | None = None) -> Iterator[Launched]:
    """`python PROGRAM --port P ARGS` on a free port P, yielded once healthy and
    stopped (`Launched.stop`) when the block ends, unless it has stopped already."""
    port = free_port()
    command = [sys.executable, *program, "--port", str(port), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its log is current when it fails
    with contextlib.ExitStack() as stack:
        if log is None:
            out = {"stdout": subprocess.PIPE, "text": True}
        else:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = {"stdout": stack.enter_context(open(log, "w"))}
        process = subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.STDOUT, **out)
        server = Launched(process, port, log)
        try:
            _wait_healthy(server, start_timeout_s)
            yield server
        finally:
            server.stop(stop_signal, grace_s)


def _wait_healthy(server: Launched, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            where = f"; see {server.log}" if server.log is not None else ""
            raise RuntimeError(f"the server exited with {server.process.returncode}{where}:\n"
                               + server.output()[-3000:])
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/health", timeout=1.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"the server did not become healthy in {timeout_s:.0f} s"
                       + (f"; see {server.log}" if server.log is not None else ""))
