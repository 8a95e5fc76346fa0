"""The routes that operate the server rather than generate: health, the hub's
stats, Prometheus metrics, and what a simulator needs to mirror this server (the
engine's description, and pages of the step and finished-request records)."""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..engine.record_ring import RecordsLost
from ..streams.prometheus import CONTENT_TYPE
from . import wire_stream
from .engine_info import describe
from .replies import refuse, service_of
from .service import LiveService
from .validation import ErrorKind, RequestError

RECORDS_PER_PAGE = 10_000


async def health(request: Request):
    service = service_of(request)
    if service.hub.shutting_down:
        return JSONResponse({"status": "shutting_down"}, 503)
    if not service.engine.alive:
        return JSONResponse({"status": "engine_stopped"}, 503)
    return JSONResponse({"status": "ok", "model": service.served.name})


async def stats(request: Request):
    return JSONResponse(service_of(request).hub.stats())


async def metrics(request: Request):
    service = service_of(request)
    view = service.hub.view
    body = service.metrics.exposition(view.snapshot, service.engine.facts.config.num_blocks,
                                      service.engine.holding())
    return Response(body, media_type=CONTENT_TYPE)


async def engine_info(request: Request):
    """The engine behind this server: model, device, dtype, hardware, torch threads,
    the scheduler's settings, the backlog policy and the streams' settings, and the
    step ring (its size, the newest step): what a simulator needs to mirror it."""
    service = service_of(request)
    return JSONResponse(describe(service.engine.facts, service.hub.view.last_step,
                                 service.hub.requests, service.served.name, service.settings))


async def steps(request: Request):
    """`GET /v1/steps?after=N&limit=M`: the records of the steps after step N (steps
    count from 1; N is 0 by default), oldest first, at most M (1 to 10,000, the
    default), as JSON lines. A page shorter than M is the end for now.

    Steps that have fallen out of the ring are not skipped over: asking for them is
    a 410 Gone whose message says which were lost, with the last of them in
    `X-Records-Lost-Through` (ask again after it to take what is still kept)."""
    service = service_of(request)
    return await _ring_page(request, service, service.engine.steps_after)


async def finished_requests(request: Request):
    """`GET /v1/requests?after=N&limit=M`: the records of the requests that finished
    after the Nth to finish, as `/v1/steps` pages steps: id, prompt tokens, arrival,
    admission, first token and finish (Unix seconds, the engine's view), finish
    reason, tokens made, tokens made after the client left, and when it left."""
    service = service_of(request)
    async def read(after: int, limit: int) -> list[dict]:
        return service.hub.requests.after(after, limit)

    return await _ring_page(request, service, read)


async def _ring_page(request: Request, service: LiveService,
                     read: Callable[[int, int], Awaitable[list[dict]]]):
    try:
        after = _count(request, "after", 0, 0, None)
        limit = _count(request, "limit", RECORDS_PER_PAGE, 1, RECORDS_PER_PAGE)
    except RequestError as exc:
        return refuse(service, exc, wire_stream.error_body)
    try:
        records = await read(after, limit)
    except RecordsLost as exc:
        error = RequestError(ErrorKind.GONE, str(exc), "after")
        return JSONResponse(wire_stream.error_body(error), error.kind.status,
                            {"X-Records-Lost-Through": str(exc.lost_through)})
    # off the event loop: a full page is a tenth of a second of JSON
    body = await run_in_threadpool(lambda: "".join(json.dumps(r) + "\n" for r in records))
    return Response(body, media_type="application/x-ndjson")


def _count(request: Request, name: str, default: int, least: int, most: int | None) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    # ASCII digits only (isdigit() also takes '²', which int() refuses), and few
    # enough for int() to read
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else -1
    if not least <= value <= (most or value):
        bounds = f"of at least {least}" if most is None else f"from {least} to {most}"
        raise RequestError(ErrorKind.INVALID, f"{name} must be an integer {bounds}, got {text!r}",
                           name)
    return value


ROUTES = [
    Route("/health", health, methods=["GET"]),
    Route("/stats", stats, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/v1/engine", engine_info, methods=["GET"]),
    Route("/v1/steps", steps, methods=["GET"]),
    Route("/v1/requests", finished_requests, methods=["GET"]),
]
