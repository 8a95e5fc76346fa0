"""The load-generating client: replays a trace against a live server, each request
sent at its arrival time (one `ReplayedRequest` each, read the way its client
reads), and reports what happened to them in the schema the simulator writes
(`RequestOutcome`). Times in the records are seconds from the replay's start.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import httpx

from traces.outcome import RequestOutcome
from traces.record import TraceRequest
from traces.sessions import Sessions
from traces.slo import Slo
from traces.summary import summarize

from .raw_http import resolve
from .replayed_request import ReplayedRequest, ReplaySetup
from .request_body import PromptFiller

log = logging.getLogger(__name__)

LAG_WARN_S = 0.020
"""A request sent later than this after its scheduled arrival is reported, unless
the caller asks for no such warning."""


@dataclass(slots=True)
class LiveReplay:
    outcomes: list[RequestOutcome]
    """In the order of the requests given."""
    started_unix: float
    """Wall-clock time of the replay's start: time 0 of every record."""
    duration_s: float
    """From the start until the last request ended."""
    stats_before: dict | None
    stats_after: dict | None
    """The server's /stats before the first request and after the last, once the
    server had no running or waiting request left (None if it could not be read)."""
    wasted_tokens_total: int | None
    """Tokens the server made after their client had left, over the replay."""
    max_lag_s: float
    """The latest any request was sent after its scheduled arrival."""
    problems: dict[str, str] = field(default_factory=dict)
    """Request id to what went wrong: a refusal (its status and message; the record
    says which `Refusal`), a connection that failed (the record says unreachable),
    an `error` event, a broken stream or an idle timeout (the record's finish_reason
    is "error")."""


async def _send_all(setup: ReplaySetup, requests: list[TraceRequest],
                    on_done: Callable[[], None] | None) -> list[ReplayedRequest]:
    """Starts each request at its arrival (scaled), or a session's when its turn
    comes (`Sessions`: think times are not scaled), and waits for all to end. A
    request never waits for another but its session's: each runs in its own task."""
    replayed = [ReplayedRequest(r, setup) for r in requests]
    by_id = {item.request.id: item for item in replayed}
    sessions = Sessions()
    tasks = []

    async def send(item: ReplayedRequest, at: float) -> None:
        item.due_s = at
        delay = at - setup.now()
        if delay > 0:
            await asyncio.sleep(delay)
        await item.run()
        if on_done is not None:
            on_done()
        following = sessions.done(item.request, setup.now())
        if following is not None:
            request, due = following
            tasks.append(asyncio.create_task(send(by_id[request.id], due)))

    for item in sorted(replayed, key=lambda x: x.request.arrival_s):
        arrival = item.request.arrival_s * setup.time_scale
        delay = arrival - setup.now()
        if delay > 0:
            await asyncio.sleep(delay)
        at = sessions.arrived(item.request, arrival)
        if at is not None:
            tasks.append(asyncio.create_task(send(item, at)))
    while tasks:  # a task may add its session's next one before it ends
        await tasks.pop()
    return replayed


async def _stats(client: httpx.AsyncClient) -> dict | None:
    try:
        response = await client.get("/stats")
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("could not read /stats: %s", exc)
        return None


def _finished(stats: dict) -> int:
    return sum(stats.get("finished", {}).values())


async def _settled_stats(client: httpx.AsyncClient, settle_s: float,
                         finished_at_least: int) -> dict | None:
    """/stats once the server has nothing running or waiting and has taken the
    engine's end of `finished_at_least` streams in all (the last leavers' cancels
    take effect a step after they left, and the tokens of that step count only once
    its events reach the hub), or after `settle_s` at most."""
    deadline = time.monotonic() + settle_s
    while True:
        stats = await _stats(client)
        busy = stats is not None and bool(
            stats.get("running") or stats.get("waiting")
            or ("finished" in stats and _finished(stats) < finished_at_least))
        if not busy or time.monotonic() >= deadline:
            return stats
        await asyncio.sleep(0.05)


async def replay_async(base_url: str, requests: list[TraceRequest], *, time_scale: float = 1.0,
                       max_connections: int | None = None,
                       prompt_filler: Callable[[TraceRequest], list[int]] = PromptFiller(),
                       timeout_s: float = 60.0, recv_buffer_bytes: int | None = None,
                       settle_s: float = 5.0, request_id_prefix: str | None = None,
                       keys: dict[str, str] | None = None, api_key: str | None = None,
                       admin_key: str | None = None,
                       on_done: Callable[[], None] | None = None,
                       warn_lag_s: float | None = LAG_WARN_S) -> LiveReplay:
    """Replays `requests` against the server at `base_url` (`POST /v1/stream`).

    time_scale: arrival times are multiplied by it (0.5 replays twice as fast);
      the clients' own pauses and leave times are not scaled.
    max_connections: at most this many requests open at once; a request that waits
      for a slot is sent late, and its arrival_s says when it was sent.
    prompt_filler: the token ids sent for a request the trace gives only as a
      token count.
    timeout_s: a request that receives nothing for this long is given up as an error.
    recv_buffer_bytes: SO_RCVBUF of every client socket (None: the OS default,
      which grows to megabytes); small values make a slow reader's backlog reach
      the server sooner.
    request_id_prefix: name each stream `<prefix><trace id>` (`X-Request-Id`), so
      that the server's records of them (`GET /v1/requests`) can be found; a trace
      id that would not make a valid request id is left to the server to name.
    keys: the secret of each key name the trace's requests carry (every name must
      have one); api_key: the secret sent with requests that carry none;
      admin_key: sent to read /stats on a server with keys.
    on_done: called as each request ends (refused, left, or read to its end).
    warn_lag_s: log a warning if requests were sent more than this after their
      arrival (None: never; `max_lag_s` still says how late the latest went).
    """
    if not time_scale > 0:
        raise ValueError(f"time_scale must be positive, got {time_scale}")
    credentials = _credentials(requests, keys or {}, api_key)
    target = await resolve(base_url)
    # trust_env off: a proxy set in the environment must not come between the
    # replay and the server it measures.
    admin = {"Authorization": f"Bearer {admin_key}"} if admin_key else None
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, trust_env=False,
                                 headers=admin) as http:
        stats_before = await _stats(http)
        setup = ReplaySetup(target, time_scale=time_scale, max_connections=max_connections,
                            prompt_filler=prompt_filler, timeout_s=timeout_s,
                            recv_buffer_bytes=recv_buffer_bytes,
                            request_id_prefix=request_id_prefix, credentials=credentials)
        replayed = await _send_all(setup, requests, on_done)
        duration_s = setup.now()
        # Every stream the server accepted ends in its engine, however its client left.
        accepted = sum(1 for r in replayed
                       if r.outcome.headers_s is not None and r.outcome.refused is None)
        finished_before = _finished(stats_before) if stats_before is not None else 0
        stats_after = await _settled_stats(http, settle_s, finished_before + accepted)
    lags = [r.outcome.arrival_s - r.due_s for r in replayed]
    late = [] if warn_lag_s is None else [lag for lag in lags if lag > warn_lag_s]
    if late:
        log.warning("%d of %d requests were sent more than %.0f ms after their arrival "
                    "(at worst %.0f ms)", len(late), len(lags), warn_lag_s * 1e3, max(late) * 1e3)
    problems = {r.request.id: r.problem for r in replayed if r.problem}
    for rid, problem in problems.items():
        log.warning("request %s: %s", rid, problem)
    wasted = None
    if stats_before is not None and stats_after is not None and "tokens_after_leave" in stats_after:
        wasted = stats_after["tokens_after_leave"] - stats_before.get("tokens_after_leave", 0)
    return LiveReplay(
        outcomes=[r.outcome for r in replayed], started_unix=setup.wall_start,
        duration_s=duration_s, stats_before=stats_before, stats_after=stats_after,
        wasted_tokens_total=wasted, max_lag_s=max(lags, default=0.0), problems=problems)


def _credentials(requests: list[TraceRequest], keys: dict[str, str],
                 api_key: str | None) -> dict[str | None, str]:
    """Each key name's secret, checked before anything is sent: a trace naming a
    key the replay has no secret for is refused whole."""
    missing = sorted({r.key for r in requests if r.key is not None} - set(keys))
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise ValueError(f"the trace names keys with no secret given: {shown} "
                         f"(give them in an api keys file)")
    credentials: dict[str | None, str] = dict(keys)
    if api_key is not None:
        credentials[None] = api_key
    return credentials


def replay(base_url: str, requests: list[TraceRequest], **options) -> LiveReplay:
    """`replay_async` on its own event loop; the options are the same."""
    return asyncio.run(replay_async(base_url, requests, **options))


def format_replay(result: LiveReplay, slo: Slo | None = None) -> str:
    """What `python -m live replay` prints: the replay's `Summary`, with the
    server's count of tokens made after their client left, and with an `slo` the
    share of requests that met it and their goodput."""
    s = summarize(result.outcomes, slo, wasted_tokens=result.wasted_tokens_total)
    reasons = Counter(o.finish_reason for o in result.outcomes
                      if o.refused is None and o.left_s is None)
    lines = [
        f"requests {s.requests}, refused {s.refused}, left {s.left}",
        "finished: " + (", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
                        or "none"),
    ]
    if s.ttft_client_p50_s is not None:
        lines.append(f"TTFT (client) p50 {s.ttft_client_p50_s * 1e3:.1f} ms, "
                     f"p99 {s.ttft_client_p99_s * 1e3:.1f} ms")
    if s.gap_p50_s is not None:
        lines.append(f"inter-token gap p50 {s.gap_p50_s * 1e3:.1f} ms, "
                     f"p99 {s.gap_p99_s * 1e3:.1f} ms; each stream's longest "
                     f"p50 {s.stall_p50_s * 1e3:.1f} ms, p99 {s.stall_p99_s * 1e3:.1f} ms")
    if s.throughput_tok_s is not None:
        lines.append(f"throughput {s.throughput_tok_s:.1f} tokens/s "
                     f"({s.tokens_generated} generated in {s.makespan_s:.2f} s)")
    if s.slo_attainment is not None:
        lines.append(f"SLO met by {s.slo_attainment:.1%} of the requests judged, goodput "
                     f"{s.goodput_tok_s or 0.0:.1f} tokens/s")
    wasted = "unknown (no /stats)" if result.wasted_tokens_total is None else s.wasted_tokens
    lines.append(f"wasted tokens (made after their client left) {wasted}")
    if result.problems:
        lines.append(f"problems {len(result.problems)} (see the log)")
    return "\n".join(lines)


def add_parser(subparsers) -> None:
    """Registers `replay` on the `python -m live` command line."""
    p = subparsers.add_parser("replay", help="replay a trace against a live server")
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--trace", required=True, help="a trace file, in any format traces reads")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply arrival times by this (0.5: twice as fast)")
    p.add_argument("--max-connections", type=int, default=None)
    p.add_argument("--timeout-s", type=float, default=60.0,
                   help="give a request up after this long without a byte")
    p.add_argument("--out", metavar="F", help="write the per-request records here as Parquet "
                   "(e.g. outcomes.parquet; traces.outcome.read_outcomes reads them)")
    p.add_argument("--request-id-prefix", metavar="P",
                   help="name each stream P<trace id> (X-Request-Id), to find the server's "
                        "record of it at GET /v1/requests")
    p.add_argument("--api-keys-file", metavar="F",
                   help="the secret of each key name the trace's requests carry, as the "
                        "server reads them (NAME:KEY a line)")
    p.add_argument("--api-key", metavar="KEY", help="sent with requests that name no key")
    p.add_argument("--admin-key", metavar="KEY", help="sent to read /stats")
    p.add_argument("--slo-ttft-s", type=float, metavar="S",
                   help="SLO: the first token read within S seconds of arrival")
    p.add_argument("--slo-tpot-s", type=float, metavar="S",
                   help="SLO: the tokens after the first read at S seconds each on average")
    p.set_defaults(func=run_replay_command)


def run_replay_command(args) -> int:
    from traces import load_trace
    from traces.outcome import write_outcomes

    from traces.names import named_keys, read_key_file

    slo = Slo.given(args.slo_ttft_s, args.slo_tpot_s)
    requests = load_trace(args.trace)
    keys = named_keys(read_key_file(args.api_keys_file)) if args.api_keys_file else None
    result = replay(args.url, requests, time_scale=args.time_scale,
                    max_connections=args.max_connections, timeout_s=args.timeout_s,
                    request_id_prefix=args.request_id_prefix, keys=keys,
                    api_key=args.api_key, admin_key=args.admin_key)
    if args.out:
        write_outcomes(args.out, result.outcomes)
    print(format_replay(result, slo))
    return 0
