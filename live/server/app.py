"""The Starlette app over one engine: the routes, and the lifespan that starts the
service with the server and stops it after the connections have closed.

Routes:
    POST /v1/stream, GET /v1/stream/{id}       the project's own SSE schema
    POST /v1/completions, /v1/chat/completions  OpenAI-compatible
    GET  /v1/models, /v1/models/{model}
    POST /v1/messages                           Anthropic-compatible
    GET  /health, /stats, /metrics              (with keys: /health open, the rest admin)
    GET  /v1/engine, /v1/steps                  what a simulator needs to mirror this server
    GET  /v1/requests                           what the engine did for each finished request"""
from __future__ import annotations

import contextlib

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request

from ..engine.engine import Engine
from ..engine.handle import EngineHandle
from scheduler.settings import ServeSettings
from . import routes_generate, routes_ops
from .access import AccessGuard, KeyRing
from .replies import envelope_for, refuse, service_of
from .service import LiveService
from .validation import ErrorKind, RequestError, ServedModel


async def no_route(request: Request, exc: HTTPException):
    """A path or a method no route serves, as a JSON error in the envelope of the
    API the path belongs to."""
    path = request.url.path
    kind = ErrorKind.NOT_ALLOWED if exc.status_code == 405 else ErrorKind.NOT_FOUND
    error = RequestError(kind, f"{request.method} {path}: {exc.detail.lower()}")
    response = refuse(service_of(request), error, envelope_for(path))
    response.headers.update(exc.headers or {})
    return response


def create_app(engine: Engine | EngineHandle, served: ServedModel, settings: ServeSettings,
               keys: KeyRing | None = None) -> Starlette:
    """`engine`: an `Engine` steps in a thread of the server's process; `keys`: those
    the settings give, if not already loaded."""
    keys = keys or KeyRing.load(settings)
    service = LiveService(engine, served, settings, keys.names)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(routes=routes_generate.ROUTES + routes_ops.ROUTES, lifespan=lifespan,
                    exception_handlers={HTTPException: no_route},
                    middleware=[Middleware(AccessGuard, keys=keys)])
    app.router.redirect_slashes = False  # a redirect to a route of another method helps no one
    app.state.service = service
    return app
