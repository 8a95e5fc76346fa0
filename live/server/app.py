"""The Starlette app over one engine: the routes, and the lifespan that starts the
service with the server and stops it after the connections have closed.

Routes:
    POST /v1/stream, GET /v1/stream/{id}       the project's own SSE schema
    POST /v1/completions, /v1/chat/completions  OpenAI-compatible
    GET  /v1/models, /v1/models/{model}
    POST /v1/messages                           Anthropic-compatible
    GET  /health, /stats, /metrics
    GET  /v1/engine, /v1/steps                  what a simulator needs to mirror this server
    GET  /v1/requests                           what the engine did for each finished request"""
from __future__ import annotations

import contextlib

from starlette.applications import Starlette

from ..engine.engine import Engine
from scheduler.settings import ServeSettings
from . import routes_generate, routes_ops
from .service import LiveService
from .validation import ServedModel


def create_app(engine: Engine, served: ServedModel, settings: ServeSettings) -> Starlette:
    service = LiveService(engine, served, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(routes=routes_generate.ROUTES + routes_ops.ROUTES, lifespan=lifespan)
    app.state.service = service
    return app
