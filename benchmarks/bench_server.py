"""What the HTTP server itself costs, all figures from one run:

(a) bytes on the wire per token for each wire format: the raw bytes of a streamed
    answer of N tokens (HTTP/1.1 head, chunk framing and events), at two lengths,
    give the cost of one more token and the fixed cost of a stream;
(b) server CPU time per streamed token: the server's process CPU time over many
    streams, divided by tokens, split into the event loop's thread (HTTP, SSE, the
    hub) and the rest (the step thread: model, core, detokenizer), beside the
    model steps' wall time from the step log (which also holds GIL waits);
(c) time to first token at idle as the client sees it, against the engine's own
    (arrival to first token at the hub, from `done.timing`): the HTTP layer's cost;
(d) open streams one server process holds with an instant model
    (benchmarks/instant_model.py), and its RSS per open stream.

(a) to (c) serve a tiny random Llama (the embedded SmolLM2's tokenizer) with
`python -m live serve`, once as it is and once with `--http2`.

    .venv/bin/python benchmarks/bench_server.py [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch

from live.client.sse_parser import SSEEvent, SSEParser
from server_process import Server, serving, tiny_model_dir

PROMPT = "Once upon a time, in a quiet town by the sea, there lived"
MESSAGES = [{"role": "user", "content": PROMPT}]
TOKEN_MARK = b"event: token"


# -- a plain HTTP/1.1 client ---------------------------------------------------------

@dataclass
class Answer:
    wire: int | None
    """Bytes of the response on the wire (HTTP/1.1 only)."""
    body: bytes
    sent: float
    first_token: float | None
    """Unix time the first token event arrived."""

    def events(self) -> list[SSEEvent]:
        return [e for e in SSEParser().feed(self.body) if isinstance(e, SSEEvent)]


def unchunk(raw: bytes) -> bytes:
    """The body of an HTTP/1.1 response with a chunked body."""
    head, rest = raw.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 200 "):
        raise RuntimeError(f"refused: {raw[:300]!r}")
    parts = []
    while rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            break
        parts.append(rest[:size])
        rest = rest[size + 2:]
    return b"".join(parts)


def request_bytes(port: int, path: str, body: dict) -> bytes:
    payload = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n").encode() + payload


async def post(port: int, path: str, body: dict) -> Answer:
    """One request on its own connection, read to the end as fast as it comes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = time.time()
    writer.write(request_bytes(port, path, body))
    raw, first = bytearray(), None
    while chunk := await reader.read(65536):
        raw += chunk
        if first is None and TOKEN_MARK in raw:
            first = time.time()
    writer.close()
    return Answer(len(raw), unchunk(bytes(raw)), sent, first)


async def post_httpx(client: httpx.AsyncClient, path: str, body: dict) -> Answer:
    sent = time.time()
    body_bytes, first = bytearray(), None
    async with client.stream("POST", path, json=body) as response:
        response.raise_for_status()
        async for chunk in response.aiter_raw():
            body_bytes += chunk
            if first is None and TOKEN_MARK in body_bytes:
                first = time.time()
    return Answer(None, bytes(body_bytes), sent, first)


# -- (a) bytes per token -------------------------------------------------------------

def own(n: int, **extra) -> tuple[str, dict]:
    return "/v1/stream", {"prompt": PROMPT, "max_new_tokens": n, **extra}


def completions(n: int, **extra) -> tuple[str, dict]:
    return "/v1/completions", {"prompt": PROMPT, "max_tokens": n, "stream": True, **extra}


def chat(n: int, **extra) -> tuple[str, dict]:
    return "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": n, "stream": True,
                                    **extra}


def messages(n: int, **extra) -> tuple[str, dict]:
    return "/v1/messages", {"messages": MESSAGES, "max_tokens": n, "stream": True, **extra}


def own_text(data: dict) -> str:
    return data.get("text", "")


def completion_text(data: dict) -> str:
    return data["choices"][0].get("text", "") if data.get("choices") else ""


def chat_text(data: dict) -> str:
    return (data["choices"][0]["delta"].get("content") or "") if data.get("choices") else ""


def message_text(data: dict) -> str:
    return data["delta"].get("text", "") if data.get("type") == "content_block_delta" else ""


USAGE = {"include_usage": True}
FORMATS = {  # name: (request, its options, the text of one event's data)
    "own `/v1/stream`": (own, {}, own_text),
    "OpenAI completions": (completions, {}, completion_text),
    "OpenAI completions + include_usage": (completions, {"stream_options": USAGE},
                                           completion_text),
    "OpenAI chat": (chat, {}, chat_text),
    "OpenAI chat + include_usage": (chat, {"stream_options": USAGE}, chat_text),
    "OpenAI chat + continuous_usage_stats": (
        chat, {"stream_options": {**USAGE, "continuous_usage_stats": True}}, chat_text),
    "Anthropic messages": (messages, {}, message_text),
}


def _text(answer: Answer, take) -> str:
    parts = []
    for event in answer.events():
        with contextlib.suppress(json.JSONDecodeError):  # `data: [DONE]`
            parts.append(take(json.loads(event.data)))
    return "".join(parts)


def request(fmt: str, n: int) -> tuple[str, dict]:
    make, options, _ = FORMATS[fmt]
    path, body = make(n, **options)
    return path, {**body, "ignore_eos": True, "temperature": 0}


async def bytes_per_token(server: Server, short: int, long: int) -> list[list]:
    rows = []
    for fmt, (_, _, take) in FORMATS.items():
        sizes = {}
        for n in (short, long):
            sizes[n] = await post(server.port, *request(fmt, n))
        a, b = sizes[short].wire, sizes[long].wire
        marginal = (b - a) / (long - short)
        text = len(_text(sizes[long], take).encode()) / long
        rows.append([fmt, a, b, f"{b / long:.1f}", f"{marginal:.1f}", f"{text:.1f}",
                     f"{b - marginal * long:.0f}"])
    return rows


# -- (b) CPU per token -----------------------------------------------------------------

@dataclass
class Window:
    label: str
    start: float
    end: float
    tokens: int
    cpu_s: float
    loop_s: float
    step_log: Path


async def stream_many(server: Server, fmt: str, streams: int, tokens: int, concurrency: int,
                      h2: bool) -> None:
    path, body = request(fmt, tokens)
    gate = asyncio.Semaphore(concurrency)

    async def one(client):
        async with gate:
            await (post_httpx(client, path, body) if h2 else post(server.port, path, body))

    if h2:
        async with httpx.AsyncClient(base_url=server.url, http1=False, http2=True,
                                     timeout=120) as client:
            await asyncio.gather(*(one(client) for _ in range(streams)))
    else:
        await asyncio.gather(*(one(None) for _ in range(streams)))


async def cpu_window(server: Server, step_log: Path, label: str, fmt: str, streams: int,
                     tokens: int, h2: bool) -> Window:
    await stream_many(server, fmt, 4, 4, 4, h2)  # warm the path
    cpu, loop, start = server.cpu_s(), server.loop_cpu_s(), time.time()
    await stream_many(server, fmt, streams, tokens, 16, h2)
    end = time.time()
    return Window(label, start, end, streams * tokens, server.cpu_s() - cpu,
                  server.loop_cpu_s() - loop, step_log)


def step_seconds(step_log: Path, start: float, end: float) -> float:
    records = [json.loads(line) for line in step_log.read_text().splitlines()]
    return sum(r["duration_s"] for r in records if start <= r["start_unix"] <= end)


def cpu_rows(windows: list[Window]) -> list[list]:
    rows = []
    for w in windows:
        model = step_seconds(w.step_log, w.start, w.end)
        wall = w.end - w.start
        per = 1e6 / w.tokens
        rows.append([w.label, w.tokens, f"{w.tokens / wall:.0f}", f"{w.cpu_s * per:.0f}",
                     f"{w.loop_s * per:.0f}", f"{(w.cpu_s - w.loop_s) * per:.0f}",
                     f"{model * per:.0f}", f"{w.cpu_s / wall:.0%}"])
    return rows


# -- (c) time to first token -----------------------------------------------------------

async def first_tokens(server: Server, count: int, client: str) -> list[tuple]:
    """(client TTFT, engine TTFT, request in, answer out) per request, one at a time."""
    path, body = request("own `/v1/stream`", 4)
    seen = []
    async with httpx.AsyncClient(base_url=server.url, http1=client != "httpx h2",
                                 http2=client == "httpx h2", timeout=60) as http:
        for _ in range(count):
            if client == "raw h1":
                answer = await post(server.port, path, body)
            else:
                answer = await post_httpx(http, path, body)
            timing = json.loads(answer.events()[-1].data)["timing"]
            seen.append((answer.first_token - answer.sent,
                         timing["first_token"] - timing["arrival"],
                         timing["arrival"] - answer.sent,
                         answer.first_token - timing["first_token"]))
    return seen


def ttft_row(label: str, seen: list[tuple], prefill_s: float) -> list:
    ms = [statistics.median(column) * 1e3 for column in zip(*seen)]
    return [label, f"{ms[0]:.2f}", f"{ms[1]:.2f}", f"{ms[0] - ms[1]:.2f}", f"{ms[2]:.2f}",
            f"{ms[3]:.2f}", f"{prefill_s * 1e3:.2f}"]


def prefill_median(step_log: Path, start: float, end: float) -> float:
    records = [json.loads(line) for line in step_log.read_text().splitlines()]
    return statistics.median(r["duration_s"] for r in records
                             if start <= r["start_unix"] <= end and r["admitted"])


# -- the run -----------------------------------------------------------------------------

def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(f"{c:,}" if isinstance(c, int) else str(c) for c in row) + " |"
              for row in rows]
    return "\n".join(lines)


CPU_FORMATS = ["own `/v1/stream`", "OpenAI chat + include_usage", "Anthropic messages"]
SERVERS = {  # name: (extra arguments, formats and clients for (b), clients for (c))
    "plain": ([], CPU_FORMATS, ["raw h1"], ["raw h1", "httpx h1"]),
    "--http2": (["--http2"], CPU_FORMATS[:1], ["raw h1", "httpx h2"], ["raw h1", "httpx h2"]),
}


def run_tiny(work: Path, quick: bool) -> None:
    """(a), (b) and (c), on the tiny model served by `python -m live serve`."""
    model = tiny_model_dir(work / "tiny-llama")
    streams, tokens = (16, 32) if quick else (64, 128)
    requests = 10 if quick else 50
    windows, ttft = [], []
    for name, (extra, formats, cpu_clients, ttft_clients) in SERVERS.items():
        step_log = work / f"steps-{name.strip('-')}.jsonl"
        command = ["-m", "live", "serve", "--model", str(model), "--threads", "1",
                   "--max-batch", "16", "--num-blocks", "4096", "--step-log", str(step_log),
                   *extra]
        with serving(command, work / f"server-{name.strip('-')}.log") as server:
            if name == "plain":
                print("\n(a) bytes on the wire per token, HTTP/1.1 (response only)\n")
                print(table(["format", "bytes, 16 tokens", "bytes, 256 tokens",
                             "per token at 256", "per extra token", "of which token text",
                             "fixed per stream"], asyncio.run(bytes_per_token(server, 16, 256))))
            for fmt in formats:
                for client in cpu_clients:
                    windows.append(asyncio.run(cpu_window(
                        server, step_log, f"{name}, {client}, {fmt}", fmt, streams, tokens,
                        h2=client == "httpx h2")))
            for client in ttft_clients:
                start = time.time()
                seen = asyncio.run(first_tokens(server, requests, client))
                ttft.append((f"{name}, {client}", seen, start, time.time(), step_log))
            assert server.stats()["blocks_reserved"] == 0
    # the step logs are complete once their servers have stopped
    print(f"\n(b) server CPU per streamed token ({streams} streams of {tokens} tokens, "
          "16 at a time; µs per token)\n")
    print(table(["server, client, format", "tokens", "tokens/s", "server CPU",
                 "event loop thread", "step thread and others", "model steps (wall, log)",
                 "server CPU / wall"], cpu_rows(windows)))
    print(f"\n(c) time to first token at idle, p50 of {requests} requests one after another "
          "(ms)\n")
    print(table(["server, client", "client TTFT", "engine TTFT", "HTTP layer", "request in",
                 "answer out", "prefill step"],
                [ttft_row(label, seen, prefill_median(log, a, b))
                 for label, seen, a, b, log in ttft]))


# -- (d) open streams ----------------------------------------------------------------------

OPEN_AT_ONCE = 256
"""Connections being opened at a time (under uvicorn's listen backlog of 2048)."""
HOLD_TOKENS = 3000
OPEN_TIMEOUT_S = 600
PROGRESS_TIMEOUT_S = 120
DRAIN_TIMEOUT_S = 60


class Holder:
    """One open stream, read as fast as it comes, counting its token events."""

    def __init__(self):
        self.tokens = 0
        self.error: Exception | None = None
        self.transport: asyncio.Transport | None = None

    async def run(self, port: int, opening: asyncio.Semaphore) -> None:
        body = {"prompt": "x", "max_new_tokens": HOLD_TOKENS, "ignore_eos": True}
        try:
            async with opening:  # held from connecting to the first token
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                self.transport = writer.transport
                writer.write(request_bytes(port, "/v1/stream", body))
                tail = await self._read(reader, b"")
            while tail is not None:
                tail = await self._read(reader, tail)
        except Exception as exc:  # noqa: BLE001 - a stream not held is what is counted
            self.error = exc

    async def _read(self, reader: asyncio.StreamReader, tail: bytes) -> bytes | None:
        chunk = await reader.read(65536)
        if not chunk:
            if self.tokens == 0:
                raise ConnectionError("closed before the first token")
            return None
        data = tail + chunk
        self.tokens += data.count(TOKEN_MARK)
        return data[-(len(TOKEN_MARK) - 1):]  # a mark cut in two is counted once


async def _until(predicate, timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True


def _busy(stats: dict) -> int:
    return stats["streams_open"] + stats["running"] + stats["waiting"]


async def hold(server: Server, n: int) -> dict:
    """Open `n` streams, see each one make progress, measure, then all clients leave
    at once (the sockets closed) and the server should let every stream go."""
    await asyncio.to_thread(lambda: httpx.post(server.url + "/v1/stream", timeout=60, json={
        "prompt": "warm", "max_new_tokens": 2}))
    result = {"n": n, "rss_idle": server.rss()}
    opening, holders = asyncio.Semaphore(OPEN_AT_ONCE), [Holder() for _ in range(n)]
    started = time.monotonic()
    tasks = [asyncio.create_task(h.run(server.port, opening)) for h in holders]
    await _until(lambda: all(h.tokens or h.error for h in holders), OPEN_TIMEOUT_S)
    result["open_s"] = time.monotonic() - started
    result["failed"] = sum(1 for h in holders if h.error or not h.tokens)
    if not result["failed"]:
        before, cpu, t = [h.tokens for h in holders], server.cpu_s(), time.monotonic()
        await _until(lambda: all(h.tokens >= b + 2 for h, b in zip(holders, before)),
                     PROGRESS_TIMEOUT_S)
        elapsed = time.monotonic() - t
        stats = await asyncio.to_thread(server.stats)
        result.update(
            progressing=sum(1 for h, b in zip(holders, before) if h.tokens >= b + 2),
            held=min(stats["streams_open"], stats["running"]),
            tokens_per_s=sum(h.tokens - b for h, b in zip(holders, before)) / elapsed,
            cpu=(server.cpu_s() - cpu) / elapsed, rss=server.rss())
    for h in holders:
        if h.transport is not None:
            h.transport.abort()
    await asyncio.gather(*tasks)
    left = time.monotonic()
    drained = await _until(lambda: not _busy(server.stats()), DRAIN_TIMEOUT_S, interval=0.5)
    result["drain_s"] = time.monotonic() - left if drained else None
    result["still_open"] = server.stats()["streams_open"]
    return result


def held_all(r: dict) -> bool:
    return not r["failed"] and r["progressing"] == r["n"] and r["held"] >= r["n"]


def hold_row(r: dict) -> list:
    n = r["n"]
    if not held_all(r):
        return [f"{n:,}", f"{r['open_s']:.1f}", f"failed: {r['failed']:,} not opened, "
                f"{n - r.get('progressing', 0):,} not progressing", "", "", "", "", ""]
    drain = (f"{r['drain_s']:.1f} s" if r["drain_s"] is not None else
             f"{r['still_open']:,} streams still open after {DRAIN_TIMEOUT_S} s")
    return [f"{n:,}", f"{r['open_s']:.1f}", f"{r['held']:,}", f"{r['tokens_per_s']:,.0f}",
            f"{r['cpu']:.0%}", f"{r['rss'] / 2**20:.0f}",
            f"{(r['rss'] - r['rss_idle']) / n / 1024:.1f}", drain]


def run_instant(work: Path, rungs: list[int]) -> list[list]:
    rows = []
    for n in rungs:
        command = ["benchmarks/instant_model.py", "--streams", str(rungs[-1]),
                   "--per-sequence-s", "200e-6"]
        with serving(command, work / f"instant-{n}.log") as server:
            result = asyncio.run(hold(server, n))
        rows.append(hold_row(result))
        if not held_all(result):
            break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small counts, to try the script")
    parser.add_argument("--parts", nargs="+", choices=["wire", "open-streams"],
                        default=["wire", "open-streams"],
                        help="wire: tables (a) to (c) on a tiny model; open-streams: table (d)")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the servers inherit it
    # every open stream takes a descriptor in the server and one here
    cap = (hard - 1000) // 1000 * 1000
    ladder = (64, 256) if args.quick else (256, 1024, 4096, 16384)
    rungs = [n for n in ladder if n <= cap]
    if not args.quick and cap > rungs[-1]:
        rungs.append(cap)
    versions = {name: importlib.metadata.version(name) for name in ("uvicorn", "zttp", "httpx")}
    print(f"{platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}, "
          f"torch {torch.__version__}, " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    with tempfile.TemporaryDirectory() as tmp:
        if "wire" in args.parts:
            run_tiny(Path(tmp), args.quick)
        if "open-streams" not in args.parts:
            return
        print(f"\n(d) open streams one server holds with an instant model, up to {rungs[-1]:,} "
              f"(open files: {hard:,}, and each stream takes one on each side)\n")
        print(table(["streams", "open all (s)", "held and progressing", "tokens/s while held",
                     "server CPU", "RSS (MiB)", "RSS per stream (KiB)",
                     "all clients gone: drained in"], run_instant(Path(tmp), rungs)))


if __name__ == "__main__":
    main()
