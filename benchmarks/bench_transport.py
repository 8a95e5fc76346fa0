"""How many bytes a connection holds for a reader that stops: the transport buffer
the simulator puts between a stream's server-side queue and its reader
(`sim.Overheads.transport_bytes`).

    .venv/bin/python benchmarks/bench_transport.py [--paddings 8000 32000]

For each padding, a server (`python -m live serve`, the embedded model, `--policy
pause --max-queued 8 --event-padding P`) streams one request to a raw socket that
never reads. Once the policy pauses the stream, every event made but the 8 queued
went into the connection: the bytes it held are those events' size on the wire
(the token event, measured from a server without padding, plus the padding's
comment line). Prints one line per padding."""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
MAX_QUEUED = 8


def serve(port: int, padding: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "live", "serve", "--port", str(port), "--threads", "1",
         "--policy", "pause", "--max-queued", str(MAX_QUEUED), "--event-padding", str(padding)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health").raise_for_status()
            return server
        except httpx.HTTPError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("the server did not start")


def stalled_stream(port: int) -> socket.socket:
    """A stream request whose reader never reads."""
    sock = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"prompt": "hi", "max_new_tokens": 4000, "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/stream HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return sock


def token_event_bytes(port: int) -> int:
    """One token event on the wire, from a short stream read whole (no padding)."""
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/stream",
                      json={"prompt": "hi", "max_new_tokens": 33, "ignore_eos": True}) as r:
        raw = b"".join(r.iter_raw())
    events = [e for e in raw.split(b"\n\n") if b"event: token" in e]
    return round(sum(len(e) + 2 for e in events) / len(events))


def held_bytes(port: int, padding: int, event_bytes: int) -> tuple[int, int]:
    server = serve(port, padding)
    try:
        sock = stalled_stream(port)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while httpx.get(url + "/stats").json()["paused"] == 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"padding {padding}: the stream was never paused")
            time.sleep(0.1)
        made = httpx.get(url + "/v1/engine").json()["steps"]["last"]  # a token a step
        sock.close()
        return made, (made - MAX_QUEUED) * (event_bytes + padding + 4)
    finally:
        server.terminate()
        server.wait(30)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paddings", type=int, nargs="+", default=[8000, 32000])
    parser.add_argument("--port", type=int, default=18341)
    args = parser.parse_args(argv)
    server = serve(args.port, 0)
    try:
        event_bytes = token_event_bytes(args.port)
    finally:
        server.terminate()
        server.wait(30)
    for padding in args.paddings:
        made, held = held_bytes(args.port, padding, event_bytes)
        print(f"padding {padding}: {made} events made before the pause, "
              f"{held / 1e6:.2f} MB held in the connection ({event_bytes + padding + 4} B an event)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
