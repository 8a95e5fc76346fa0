"""What the serving path delivers when the engine is never the limit: the stand-in
model (benchmarks/instant_model.py) answers each step after 1 ms whatever the
batch, and a load client in its own process (benchmarks/stream_reader.py) reads
every stream as fast as it comes. For each row: delivered tokens/s (every token
of every stream, from the first request sent to the last stream's end), against
what the engine could make at that batch, the server's CPU per token split
between the event loop's thread (HTTP, SSE, the hub), the server's other threads
(the step thread, or the relay of an engine process) and the engine's process,
and the client's, which shares the machine's cores. Each row runs with the engine
in a thread of the server and in a process of its own (`--engine`), one right
after the other. Then the client's TTFT at idle against the engine's first token.

    .venv/bin/python benchmarks/bench_serving_path.py [--quick] [--rows own-h1-256 ...]
        [--engine thread process] [--tokenizer DIR]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_server import first_tokens, table
from server_process import ROOT, Server, serving

STEP_S = 0.001
ROWS = {  # name: (format, HTTP/2, streams, tokens a stream)
    "own-h1-32": ("own", False, 32, 500),
    "own-h1-256": ("own", False, 256, 200),
    "own-h1-1024": ("own", False, 1024, 100),
    # the same streams four times as long: the rate once every stream is open
    "own-h1-256-long": ("own", False, 256, 800),
    "own-h1-1024-long": ("own", False, 1024, 400),
    "chat-h1-256": ("chat", False, 256, 200),
    "anthropic-h1-256": ("anthropic", False, 256, 200),
    "own-h2-256": ("own", True, 256, 200),
    "own-h2-1024": ("own", True, 1024, 100),
}
QUICK = {"own-h1-32": ("own", False, 32, 50), "own-h2-32": ("own", True, 32, 50)}


def thread_cpu(server: Server) -> tuple[float, float, float]:
    """(event loop thread, every other thread, the engine's process) CPU seconds so far."""
    loop = rest = 0.0
    for t in server.process.threads():
        if t.id == server.process.pid:
            loop += t.user_time + t.system_time
        else:
            rest += t.user_time + t.system_time
    engine = sum(c.cpu_times().user + c.cpu_times().system for c in server.process.children())
    return loop, rest, engine


def read(server: Server, fmt: str, http2: bool, streams: int, tokens: int) -> dict:
    command = [sys.executable, str(ROOT / "benchmarks" / "stream_reader.py"),
               "--port", str(server.port), "--format", fmt, "--streams", str(streams),
               "--tokens", str(tokens)] + (["--http2"] if http2 else [])
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout)


def measure(server: Server, engine: str, fmt: str, http2: bool, streams: int,
            tokens: int) -> list:
    read(server, fmt, http2, min(streams, 32), 8)  # warm: connections, first renders
    loop0, rest0, engine0 = thread_cpu(server)
    seen = read(server, fmt, http2, streams, tokens)
    loop1, rest1, engine1 = thread_cpu(server)
    if seen["complete"] != streams:
        raise RuntimeError(f"{streams - seen['complete']} of {streams} streams did not end")
    made = streams * tokens
    wall = max(seen["ended"]) - seen["sent"]
    per = 1e6 / made
    could = streams / STEP_S
    return [f"{fmt}, {'HTTP/2' if http2 else 'HTTP/1.1'}", streams, tokens, engine,
            round(made / wall), round(could), f"{(loop1 - loop0) * per:.1f}",
            f"{(rest1 - rest0) * per:.1f}", f"{(engine1 - engine0) * per:.1f}",
            f"{seen['cpu_s'] * per:.1f}", f"{seen['bytes'] / made:.0f}"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small counts, to try the script")
    parser.add_argument("--rows", nargs="+", choices=sorted(ROWS), help="only these rows")
    parser.add_argument("--engine", nargs="+", choices=["thread", "process"],
                        default=["thread", "process"], help="where the engine steps")
    parser.add_argument("--ttft-requests", type=int, default=50)
    parser.add_argument("--tokenizer", help="the stand-in model's tokenizer directory "
                                            "(default: the embedded SmolLM2's)")
    args = parser.parse_args()
    rows = QUICK if args.quick else {k: v for k, v in ROWS.items()
                                     if not args.rows or k in args.rows}
    print(f"{platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
          f"stand-in model, {STEP_S * 1e3:.0f} ms steps")
    most = max(streams for _, _, streams, _ in rows.values())
    results, ttft = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for http2 in (False, True):
            chosen = [v for v in rows.values() if v[1] == http2]
            if not chosen:
                continue
            servers = {}
            for engine in args.engine:
                command = ["benchmarks/instant_model.py", "--streams", str(most), "--step-s",
                           str(STEP_S), "--per-sequence-s", "0"] + (["--http2"] if http2 else [])
                command += ["--engine-process"] if engine == "process" else []
                command += ["--tokenizer", args.tokenizer] if args.tokenizer else []
                servers[engine] = serving(command, Path(tmp) / f"instant-{http2}-{engine}.log")
            with contextlib.ExitStack() as stack:
                running = {engine: stack.enter_context(s) for engine, s in servers.items()}
                for fmt, h2, streams, tokens in chosen:
                    # the placements one right after the other, so that each row compares
                    # them on the machine as it is at that moment
                    for engine, server in running.items():
                        results.append(measure(server, engine, fmt, h2, streams, tokens))
                        print(" | ".join(map(str, results[-1])), flush=True)
                if not http2:
                    for engine, server in running.items():
                        seen = asyncio.run(first_tokens(server, args.ttft_requests, "raw h1"))
                        ttft[engine] = [statistics.median(column) * 1e3 for column in zip(*seen)]
    print()
    print(table(["format", "streams", "tokens each", "engine", "delivered tokens/s",
                 "the engine could make", "event loop µs/token", "server's other threads µs/token",
                 "engine process µs/token", "client µs/token", "bytes/token"], results))
    for engine, times in ttft.items():
        print(f"\nTTFT at idle, engine in a {engine}, p50 of {args.ttft_requests}, own format, "
              f"raw HTTP/1.1: the client sees {times[0]:.2f} ms, the engine made it after "
              f"{times[1]:.2f} ms: {times[0] - times[1]:.2f} ms of HTTP and streaming (request "
              f"in {times[2]:.2f} ms, first token out {times[3]:.2f} ms)")


if __name__ == "__main__":
    main()
