"""Nothing leaks at scale: thousands of streams against a real uvicorn server on a
tiny random Llama, replayed by the project's load generator, with keys at their
per-key limits, followers attached by GET, and clients that read to the end, leave
by FIN or RST after a few tokens, or read slowly and leave.

Afterwards: the pool is whole, nothing runs, waits, pauses or is read, no key holds
anything, the server's event loop has the tasks it had before and the process the
sockets it had before, and no leaver's stream made more than one token after the
server saw it leave (the step already in flight).

    .venv/bin/python benchmarks/leak_streams.py --streams 3000
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from live.client.loadgen import replay_async  # noqa: E402
from live.client.request_body import PromptFiller  # noqa: E402
from leaky_clients import leaky_clients  # noqa: E402
from live_server import ServerThread, tiny_app, wait_for  # noqa: E402
from scheduler.settings import ServeSettings  # noqa: E402
from tiny_models import VOCAB  # noqa: E402
from traces import Fixed, Uniform, generate  # noqa: E402
from traces.shaping import assign_keys  # noqa: E402

MAX_NEW = 48
ADMIN = "leak-admin-secret"


def secrets(keys: int) -> dict[str, str]:
    return {f"key-{i}": f"secret-{i}-leak" for i in range(keys)}


def make_trace(count: int, rate: float, keys: int, seed: int):
    requests = generate(rate=rate, count=count, prompt_lengths=Uniform(4, 12),
                        output_lengths=Fixed(MAX_NEW), seed=seed)
    mixed = leaky_clients(count, np.random.default_rng(seed))
    return assign_keys([replace(r, client=c) for r, c in zip(requests, mixed)], keys,
                       skew=1.2, seed=seed)


async def follow(url: str, request, secret: str, delay_s: float, read_events: int) -> str:
    """A GET attached to one stream a little after it arrives: reads some events
    (all when `read_events` is 0) and leaves. Its status, or what broke."""
    await asyncio.sleep(delay_s)
    headers = {"Authorization": f"Bearer {secret}"}
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as http:
            async with http.stream("GET", f"/v1/stream/s-{request.id}", headers=headers) as r:
                if r.status_code == 200:
                    seen = 0
                    async for line in r.aiter_lines():
                        seen += line.startswith("id: ")
                        if read_events and seen >= read_events:
                            break
                return str(r.status_code)
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def drive(url: str, trace, keys: dict[str, str], followers: int, seed: int, scale: float):
    rng = np.random.default_rng(seed + 1)
    chosen = rng.choice(len(trace), size=followers, replace=False)
    follows = [follow(url, trace[i], keys[trace[i].key], trace[i].arrival_s * scale + 0.1,
                      int(rng.integers(0, 6))) for i in chosen]
    result, *statuses = await asyncio.gather(
        replay_async(url, trace, time_scale=scale, max_connections=400,
                     prompt_filler=PromptFiller(low=1, high=VOCAB), timeout_s=60.0,
                     request_id_prefix="s-", keys=keys, admin_key=ADMIN, settle_s=30.0),
        *follows)
    return result, Counter(statuses)


def socket_fds() -> int:
    count = 0
    for fd in Path(f"/proc/{os.getpid()}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except FileNotFoundError:  # closed while listed (the listing's own fd, too)
            pass
    return count


def loop_tasks(loop: asyncio.AbstractEventLoop) -> int:
    async def count():
        return len(asyncio.all_tasks()) - 1  # not this one
    return asyncio.run_coroutine_threadsafe(count(), loop).result(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=60.0, help="arrivals a second")
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--max-streams-per-key", type=int, default=8)
    parser.add_argument("--followers", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    logging.getLogger("live.client.loadgen").setLevel(logging.ERROR)  # refusals expected

    keys = secrets(args.keys)
    trace = make_trace(args.streams, args.rate, args.keys, args.seed)
    settings = ServeSettings(api_key=tuple(f"{n}:{s}" for n, s in keys.items()), admin_key=ADMIN,
                             max_streams_per_key=args.max_streams_per_key)
    app, engine = tiny_app(settings, max_batch=16, num_blocks=1024, max_waiting=512,
                           max_streams_per_key=args.max_streams_per_key)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with ServerThread(app) as server:
        url = server.base_url
        loop = app.state.service._loop
        tasks_before, sockets_before = loop_tasks(loop), socket_fds()
        started = time.perf_counter()
        result, follow_statuses = asyncio.run(drive(url, trace, keys, args.followers,
                                                    args.seed, 1.0))
        wall_s = time.perf_counter() - started

        def settled():
            s = httpx.get(url + "/stats", headers=admin).json()
            busy = (s["running"] or s["waiting"] or s["paused"] or s["inbox"] or s["readers"]
                    or s["streams_open"] or s["blocks_reserved"] or s["queued_events"])
            return None if busy else s
        after = wait_for(settled, timeout=60.0, what="every stream to end and every block back")
        wait_for(lambda: loop_tasks(loop) <= tasks_before, timeout=30.0, what="tasks to end")
        wait_for(lambda: socket_fds() <= sockets_before, timeout=30.0, what="sockets to close")
        tasks_after, sockets_after = loop_tasks(loop), socket_fds()
        connections = len(server.server.server_state.connections)
        records = app.state.service.hub.requests.after(0)
        holding = engine.core.keys.holding()

    outcomes = result.outcomes
    refused = Counter(str(o.refused) for o in outcomes if o.refused)
    leavers = [r for r in records if r["left_unix"] is not None]
    after_leave = Counter(r["tokens_after_leave"] for r in leavers)
    figures = {
        "streams": len(trace), "wall_s": round(wall_s, 1),
        "served": sum(1 for o in outcomes if o.refused is None),
        "refused": dict(refused),
        "problems": len(result.problems) - sum(refused.values()),
        "followers": dict(follow_statuses),
        "leavers_seen_by_server": len(leavers),
        "tokens_after_leave": {str(k): v for k, v in sorted(after_leave.items())},
        "blocks_reserved": after["blocks_reserved"], "blocks_free": after["blocks_free"],
        "num_blocks": after["num_blocks"], "keys_holding": len(holding),
        "tasks": [tasks_before, tasks_after], "sockets": [sockets_before, sockets_after],
        "connections_left": connections, "drained": engine.core.is_drained(),
        "admissions": after["admissions"], "releases": after["releases"],
    }
    ok = (figures["problems"] == 0 and after["blocks_reserved"] == 0
          and after["blocks_free"] == after["num_blocks"] and not holding
          and tasks_after <= tasks_before and sockets_after <= sockets_before
          and connections == 0 and figures["drained"]
          and after["admissions"] == after["releases"]
          and max(after_leave, default=0) <= 1 and refused.get("key_limit", 0) > 0)
    figures["ok"] = ok
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print("| figure | value |\n|---|---|")
    for name, value in figures.items():
        print(f"| {name} | {value} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
