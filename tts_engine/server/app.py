"""The FastAPI app: routes, error handlers, the body-size guard, and the engine's lifecycle.

`create_app(engine, config)` owns the engine from the app's startup to its shutdown: startup
launches `engine.start()` in the background (so `/health` answers and `/ready` says 503 during
warm-up), shutdown awaits `engine.stop()`. Routes:

  POST /v1/audio/speech   http_speech.py
  WS   /v1/stream         ws_stream.py
  GET  /health            200 while the engine starts or runs, 503 once it failed, stopped or stalled
  GET  /ready             200 once warm-up is done and the engine is healthy, else 503
  GET  /metrics           Prometheus text format
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from .config import ServerConfig
from .engine_link import ServedEngine, engine_alive, engine_stalled
from .errors import ApiError
from .http_speech import ENDPOINT as SPEECH
from .http_speech import make_speech_endpoint
from .metrics import CONTENT_TYPE, ServerMetrics
from .schemas import SpeechRequest
from .ws_stream import Connection

log = logging.getLogger(__name__)
KNOWN_PATHS = frozenset({SPEECH, "/health", "/ready", "/metrics"})


class _Lifecycle:
    def __init__(self, engine: ServedEngine):
        self.engine = engine
        self.start_task: asyncio.Task | None = None
        self.stopped = False

    @property
    def starting(self) -> bool:
        return self.start_task is not None and not self.start_task.done()

    @property
    def start_failed(self) -> bool:
        t = self.start_task
        return t is not None and t.done() and (t.cancelled() or t.exception() is not None)

    def healthy(self) -> bool:
        if self.stopped or self.start_failed or engine_stalled(self.engine):
            return False
        return self.starting or engine_alive(self.engine)

    def ready(self) -> bool:
        return not self.starting and self.healthy() and bool(self.engine.ready)


def create_app(engine: ServedEngine, config: ServerConfig | None = None, *,
               manage_engine: bool = True) -> FastAPI:
    """`manage_engine=False`: the caller starts and stops the engine itself."""
    cfg = (config or ServerConfig()).validate()
    metrics = ServerMetrics(engine.metrics)
    life = _Lifecycle(engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if manage_engine:
            life.start_task = asyncio.create_task(engine.start())
            life.start_task.add_done_callback(_log_start_failure)
        try:
            yield
        finally:
            life.stopped = True
            if life.start_task is not None and not life.start_task.done():
                life.start_task.cancel()
                await asyncio.gather(life.start_task, return_exceptions=True)
            if manage_engine:
                try:
                    await engine.stop()
                except Exception:
                    log.exception("engine.stop() failed")

    app = FastAPI(title="Cadence", summary="Streaming Qwen3-TTS", lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.metrics = metrics
    app.add_middleware(HttpGuard, max_body_bytes=cfg.max_body_bytes, metrics=metrics)

    async def api_error(request: Request, exc: ApiError) -> Response:
        metrics.rejections.labels(exc.code).inc()
        return JSONResponse(exc.http_body(), exc.http_status, headers=exc.http_headers())

    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            exc.status_code, "invalid_request")
        err = ApiError(code, str(exc.detail))
        return JSONResponse(err.http_body(), exc.status_code, headers=exc.headers)

    async def internal_error(request: Request, exc: Exception) -> Response:
        # Runs in Starlette's outermost middleware, outside HttpGuard's count: counted here, unless
        # the response had started (then nothing more is sent, and HttpGuard counted its status).
        if not request.scope.get(RESPONSE_STARTED):
            metrics.http_responses.labels(endpoint_label(request.url.path), "500").inc()
        err = ApiError("internal_error", "internal server error")
        return JSONResponse(err.http_body(), 500)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)

    schema = SpeechRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    app.add_api_route(SPEECH, make_speech_endpoint(engine, cfg, metrics), methods=["POST"],
                      response_class=Response, summary="Synthesise speech (OpenAI-compatible)",
                      openapi_extra={"requestBody": {"required": True, "content": {
                          "application/json": {"schema": schema}}}})

    ws_open: set[Connection] = set()  # file descriptors and tasks: each connection holds both

    async def stream_ws(websocket: WebSocket) -> None:
        conn = Connection(websocket, engine, cfg, metrics)
        if len(ws_open) >= cfg.max_ws_connections:
            metrics.rejections.labels("too_many_connections").inc()
            await conn.refuse(1013, f"the server holds its limit of {cfg.max_ws_connections} connections")
            return
        ws_open.add(conn)
        try:
            await conn.run()
        finally:
            ws_open.discard(conn)

    app.add_api_websocket_route("/v1/stream", stream_ws)

    async def health() -> Response:
        ok = life.healthy()
        status = "starting" if ok and life.starting else "ok" if ok else \
            "stalled" if engine_stalled(engine) else "failed"
        return JSONResponse({"status": status}, 200 if ok else 503)

    async def ready() -> Response:
        ok = life.ready()
        return JSONResponse({"ready": ok}, 200 if ok else 503, headers=None if ok else {"Retry-After": "1"})

    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/ready", ready, methods=["GET"])
    app.add_api_route("/metrics", prometheus, methods=["GET"])
    return app


RESPONSE_STARTED = "cadence.response_started"  # scope key: HttpGuard has counted this response


def endpoint_label(path: str) -> str:
    """The `endpoint` label of a request path (unknown paths share one, so labels stay few)."""
    return path if path in KNOWN_PATHS else "other"


def _log_start_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("engine failed to start", exc_info=task.exception())


class HttpGuard:
    """Pure ASGI middleware: refuses bodies over `max_body_bytes` (413, by Content-Length before
    reading, or while reading a chunked body) and counts responses by endpoint and status."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, metrics: ServerMetrics):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = endpoint_label(scope["path"])

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                scope[RESPONSE_STARTED] = True
                self.metrics.http_responses.labels(endpoint, str(message["status"])).inc()
            await send(message)

        too_large = ApiError("payload_too_large", f"request body is over {self.max_body_bytes} bytes")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            self.metrics.rejections.labels(too_large.code).inc()
            body = json.dumps(too_large.http_body()).encode()
            await counted_send({"type": "http.response.start", "status": 413, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"connection", b"close")]})
            await counted_send({"type": "http.response.body", "body": body})
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise too_large
            return message

        await self.app(scope, limited_receive, counted_send)
