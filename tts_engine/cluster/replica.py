"""The Serve deployments: `EngineReplica` (one StreamingEngine and the single server's FastAPI app,
create_app unchanged, per process and GPU) and `ClusterMetrics` (the summed /metrics).

Serve's proxy hands each HTTP request and WebSocket connection to a replica chosen by
router.HeadroomRouter; the replica's own app then does everything a single `cadence serve` does:
validation, admission (503 + Retry-After / `overloaded`), streaming, drain, its own metrics.
A replica whose engine fails reports it in check_health, and Serve replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys

from fastapi import FastAPI
from ray import serve
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .headroom import headroom
from .metrics import PUSH_EVERY_S, Board

log = logging.getLogger(__name__)
METRICS_APP = "cadence-metrics"
# Serve logs each request at INFO by default: a line per stream, in every replica.
QUIET = {"log_level": "WARNING", "enable_access_log": False}


@serve.ingress()
class EngineReplica:
    async def __init__(self, model: str, device: str, settings) -> None:
        from ..engine.core import StreamingEngine
        from ..server.security import with_api_keys

        self.name = serve.get_replica_context().replica_id.unique_id
        self.server = with_api_keys(settings.server, os.environ)
        self.engine = StreamingEngine(model, device=device, scheduler=settings.scheduler,
                                      codec_precision=settings.engine.codec_precision,
                                      freeze_gc=settings.engine.gc_freeze, max_context=settings.engine.max_context)
        # as `cadence serve` does: the engine thread waits at most this long for the GIL (settings.py)
        sys.setswitchinterval(settings.engine.gil_switch_ms / 1e3)
        self._push = asyncio.create_task(self._push_metrics())

    def __serve_build_asgi_app__(self) -> FastAPI:
        from ..server.app import create_app

        self.server_app = create_app(self.engine, self.server)
        return named(self.server_app, self.name)

    def record_routing_stats(self) -> dict:
        return headroom(self.engine)

    def check_health(self) -> None:
        fault = getattr(getattr(self, "server_app", None), "state", None)
        if fault is not None and fault.fault is not None:
            raise RuntimeError(fault.fault)

    async def _push_metrics(self) -> None:
        board = serve.get_deployment_handle("ClusterMetrics", app_name=METRICS_APP)
        while True:
            await asyncio.sleep(PUSH_EVERY_S)
            app = getattr(self, "server_app", None)
            if app is None:
                continue
            with contextlib.suppress(Exception):  # the board restarting must not stop the engine
                await board.report.remote(self.name, app.state.metrics.render().decode())


REPLICA_HEADER = b"x-cadence-replica"


def named(app: ASGIApp, name: str) -> ASGIApp:
    """`app` answering with an x-cadence-replica header (HTTP responses and WebSocket handshakes), so a
    client and the tests can tell which replica served them."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        async def tagged(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER, name.encode())]}
            await send(message)

        await app(scope, receive, tagged if scope["type"] in ("http", "websocket") else send)

    return wrapped


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0}, logging_config=QUIET)
@serve.ingress()
class ClusterMetrics:
    """GET (any path under /metrics): the summed metrics; report(): a replica's push."""

    def __init__(self) -> None:
        self.board = Board()

    def report(self, replica: str, text: str) -> None:
        self.board.report(replica, text)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        from ..server.metrics import CONTENT_TYPE

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "lifespan":  # nothing to start or stop
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
                return
            response = Response(self.board.render(), media_type=CONTENT_TYPE) if scope["method"] in ("GET", "HEAD") \
                else Response(status_code=405)
            await response(scope, receive, send)

        return app
