"""Proxy: the first event of a stream through a real nginx in front of the server,
proxied as nginx does by default (which honours the server's `X-Accel-Buffering:
no`), with `proxy_buffering on` that ignores it, and with gzip on
text/event-stream, against the server reached directly."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from live.client.launch import free_port
from traces import TraceRequest

from .bench import NOT_MODELLED, Bench, Findings, Quantity, Skipped, ms, percentile
from .timed_client import Timing, over_one_client

PROMPT_TOKENS = 16

SETUPS = {
    "default proxying": "",
    "proxy_buffering on, X-Accel-Buffering ignored": (
        "proxy_buffering on; proxy_ignore_headers X-Accel-Buffering;"),
    "gzip on text/event-stream": (
        "gzip on; gzip_types text/event-stream; gzip_min_length 0; gzip_proxied any;"),
}
"""What each nginx location adds to plain proxying."""


class NginxMissing(Skipped):
    """No nginx on this machine."""


@dataclass(frozen=True)
class ProxySize:
    tokens: int = 16
    repeats: int = 3
    """Streams through each setup, one after another."""


def nginx_config(upstream: str, ports: dict[str, int], prefix: Path) -> str:
    servers = "\n".join(
        f"    server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass {upstream}; "
        f"proxy_http_version 1.1; proxy_set_header Connection \"\"; {SETUPS[name]} }} }}"
        for name, port in ports.items())
    return (f"worker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\n"
            "events { worker_connections 64; }\n"
            f"http {{\n    access_log off;\n"
            + "".join(f"    {kind}_temp_path {prefix}/{kind};\n"
                      for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
            + f"{servers}\n}}\n")


@contextlib.contextmanager
def nginx(upstream: str) -> Iterator[dict[str, str]]:
    """nginx in the foreground, one port a setup, stopped when the block ends;
    yields each setup's URL."""
    program = shutil.which("nginx")
    if program is None:
        raise NginxMissing("nginx is not installed (apt-get install -y nginx)")
    ports = {name: free_port() for name in SETUPS}
    with tempfile.TemporaryDirectory(prefix="study-nginx-") as prefix:
        os.chmod(prefix, 0o755)  # its workers may run as another user
        conf = Path(prefix) / "nginx.conf"
        conf.write_text(nginx_config(upstream, ports, Path(prefix)))
        process = subprocess.Popen([program, "-p", prefix, "-c", str(conf), "-g", "daemon off;"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
            _wait_listening(process, urls.values())
            yield urls
        finally:
            process.terminate()
            process.wait(10)


def _wait_listening(process: subprocess.Popen, urls) -> None:
    deadline = time.monotonic() + 20
    for url in urls:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"nginx exited with {process.returncode}: "
                                   f"{process.stderr.read()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                httpx.get(f"{url}/health", timeout=1.0, trust_env=False)
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"nginx did not listen at {url}")
            time.sleep(0.1)


def nginx_version() -> str:
    """As `nginx -v` says it (on its stderr)."""
    out = subprocess.run([shutil.which("nginx"), "-v"], capture_output=True, text=True)
    return (out.stderr or out.stdout).strip().removeprefix("nginx version: ")


def run(bench: Bench, size: ProxySize = ProxySize()) -> Findings:
    if shutil.which("nginx") is None:
        raise NginxMissing("nginx is not installed (apt-get install -y nginx)")
    trace = [TraceRequest("through", 0.0, PROMPT_TOKENS, size.tokens)]
    timings: dict[str, list[Timing]] = {}
    with bench.server("proxy") as target:
        direct = bench.compare(target, "direct", trace)
        key = target.access.replay_options()["api_key"]
        timings["direct"] = [over_one_client(target.url, trace, 1, False, key)["through"]
                             for _ in range(size.repeats)]
        with nginx(target.url) as urls:
            for name, url in urls.items():
                timings[name] = [over_one_client(url, trace, 1, False, key)["through"]
                                 for _ in range(size.repeats)]
    sim_first = direct.sim.outcomes[0]
    quantities = []
    for name, runs in timings.items():
        reference = {"direct": "0.3", "proxy_buffering on, X-Accel-Buffering ignored": "405 "
                     "(a proxy waiting for 4 KB)"}.get(name, "")
        is_direct = name == "direct"
        quantities += [
            Quantity(f"{name}: first event p50 (ms)", ms(percentile([r.first_event_s for r in runs], 50)),
                     NOT_MODELLED if not is_direct else ms(sim_first.headers_s), reference),
            Quantity(f"{name}: first token p50 (ms)", ms(percentile([r.first_token_s for r in runs], 50)),
                     NOT_MODELLED if not is_direct else ms(sim_first.first_token_client_s)),
            Quantity(f"{name}: stream end p50 (ms)", ms(percentile([r.end_s for r in runs], 50)),
                     NOT_MODELLED if not is_direct else ms(sim_first.finish_s)),
        ]

    def draw(fig):
        ax = fig.subplots()
        names = list(timings)
        for n, name in enumerate(names):
            ax.barh(n - 0.2, ms(percentile([r.first_event_s for r in timings[name]], 50)), 0.4,
                    color="C0", label="first event" if n == 0 else None)
            ax.barh(n + 0.2, ms(percentile([r.first_token_s for r in timings[name]], 50)), 0.4,
                    color="C1", label="first token" if n == 0 else None)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set(xlabel="ms from the request (p50)", title="through nginx")
        ax.grid(alpha=0.3)
        ax.legend()

    return Findings(
        title="Proxy: the first event through nginx",
        setup=(f"Streams of {size.tokens} tokens, {size.repeats} through each setup one after "
               "another, from an httpx client that accepts gzip: directly, and through one "
               "nginx (HTTP/1.1 upstream) in three setups."),
        quantities=quantities, draw=draw,
        notes=[f"Proxy: {nginx_version()}, one worker, HTTP/1.1 to the server.",
               "The simulator has no proxy: only the direct row has simulated figures (the "
               "first event is the stream's start, when the simulated client got its headers).",
               "The first event is the stream's `start`, written before the engine admits the "
               "request; a proxy that holds the bytes back shows it late."])
