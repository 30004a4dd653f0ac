"""The FastAPI app: routes, error handlers, the body-size guard, and the engine's lifecycle.

`create_app(engine, config)` owns the engine from the app's startup to its shutdown: startup
launches `engine.start()` in the background (so `/health` answers and `/ready` says 503 during
warm-up), shutdown awaits `engine.stop()`. Routes:

  POST /v1/audio/speech   http_speech.py
  WS   /v1/stream         ws_stream.py
  GET  /health            200 while the engine starts or runs, 503 once it failed, stopped or stalled
  GET  /ready             200 once warm-up is done and the engine is healthy, else 503
  GET  /metrics           Prometheus text format (unless metrics_enabled is off)
  POST /v1/tokens         a short-lived browser token for an API key (security.py)
Every request passes AccessGuard first (keys, Origin, Host: security.py). `app.state.drain` is the
graceful shutdown that server/run.py starts on SIGINT/SIGTERM (drain.py).
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
from .drain import Drain
from .engine_link import ServedEngine, engine_alive, engine_stalled
from .errors import ApiError
from .http_speech import ENDPOINT as SPEECH
from .http_speech import make_speech_endpoint
from .metrics import CONTENT_TYPE, ServerMetrics
from .quota import ClientQuota, client_of
from .schemas import SpeechRequest
from .security import AccessGuard, AccessPolicy
from .voices import ENDPOINT as VOICES
from .voices import MAX_UPLOAD_BYTES, voices_router
from .ws_stream import Connection

log = logging.getLogger(__name__)
KNOWN_PATHS = frozenset({SPEECH, VOICES, "/health", "/ready", "/metrics", "/v1/tokens"})


class _Lifecycle:
    def __init__(self, engine: ServedEngine, drain: Drain):
        self.engine = engine
        self.drain = drain
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
        return not (self.starting or self.drain.draining) and self.healthy() and bool(self.engine.ready)


def create_app(engine: ServedEngine, config: ServerConfig | None = None, *,
               manage_engine: bool = True) -> FastAPI:
    """`manage_engine=False`: the caller starts and stops the engine itself."""
    cfg = (config or ServerConfig()).validate().check_exposure()
    metrics = ServerMetrics(engine.metrics)
    drain = Drain()
    life = _Lifecycle(engine, drain)
    reject = metrics.rejections.labels
    streams = ClientQuota("streams", cfg.max_streams_per_client)  # its refusals are counted as ApiErrors
    ws_quota = ClientQuota("WebSocket connections", cfg.max_ws_connections_per_client)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        watcher = None
        if manage_engine:
            life.start_task = asyncio.create_task(engine.start())
            life.start_task.add_done_callback(_log_start_failure)
            watcher = asyncio.create_task(watch_engine())
        try:
            yield
        finally:
            life.stopped = True
            if watcher is not None:
                watcher.cancel()
            if life.start_task is not None and not life.start_task.done():
                life.start_task.cancel()
                await asyncio.gather(life.start_task, return_exceptions=True)
            if manage_engine:
                try:
                    await engine.stop()
                except Exception:
                    log.exception("engine.stop() failed")

    async def watch_engine() -> None:
        """An engine that fails, at warm-up or later, is reported once: `app.state.fault` says why, and
        `app.state.on_fault()` runs (serve() then stops the server, which exits non-zero for a supervisor
        to restart it); every open stream has had its error event from the engine."""
        while not life.stopped:
            await asyncio.sleep(0.1)
            task = life.start_task
            if task is None or not task.done():
                continue
            if life.start_failed:
                app.state.fault = f"engine failed to start: {task.exception() if not task.cancelled() else 'cancelled'}"
            elif not engine_alive(engine):
                app.state.fault = f"engine failed: {getattr(engine, 'fault', None) or 'its loop stopped'}"
            else:
                continue
            log.error("%s", app.state.fault)
            if app.state.on_fault is not None:
                app.state.on_fault()
            return

    app = FastAPI(title="Cadence", summary="Streaming Qwen3-TTS", lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.metrics = metrics
    app.state.drain = drain
    app.state.fault = None  # why the engine failed, once it has (watch_engine)
    app.state.on_fault = None
    app.add_middleware(AccessGuard, policy=AccessPolicy.from_server_config(cfg),
                       on_reject=lambda code: reject(code).inc())
    app.add_middleware(HttpGuard, max_body_bytes=cfg.max_body_bytes, metrics=metrics)  # outermost: counts all

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
    app.add_api_route(SPEECH, make_speech_endpoint(engine, cfg, metrics, streams, drain), methods=["POST"],
                      response_class=Response, summary="Synthesise speech (OpenAI-compatible)",
                      openapi_extra={"requestBody": {"required": True, "content": {
                          "application/json": {"schema": schema}}}})
    app.include_router(voices_router(engine, cfg))

    ws_open: set[Connection] = set()  # file descriptors and tasks: each connection holds both

    async def stream_ws(websocket: WebSocket) -> None:
        client = client_of(websocket.scope)
        conn = Connection(websocket, engine, cfg, metrics, streams=streams, drain=drain, client=client)
        if len(ws_open) >= cfg.max_ws_connections:
            metrics.rejections.labels("too_many_connections").inc()
            await conn.refuse(1013, f"the server holds its limit of {cfg.max_ws_connections} connections")
            return
        if drain.draining:
            metrics.rejections.labels("shutting_down").inc()
            await conn.refuse(1012, "the server is shutting down")
            return
        try:
            ws_quota.acquire(client)
        except ApiError as e:
            metrics.rejections.labels(e.code).inc()
            await conn.refuse(1008, e.message)
            return
        ws_open.add(conn)
        try:
            await conn.run()
        finally:
            ws_open.discard(conn)
            ws_quota.release(client)

    app.add_api_websocket_route("/v1/stream", stream_ws)

    async def health() -> Response:
        ok = life.healthy()
        status = "starting" if ok and life.starting else "ok" if ok else \
            "stalled" if engine_stalled(engine) else "failed"
        body = {"status": status}
        if status == "failed":  # tells a supervisor whether this process is on its way out (restart it)
            body["exiting"] = app.state.on_fault is not None
        if drain.draining:
            body["draining"] = True
        return JSONResponse(body, 200 if ok else 503)

    async def ready() -> Response:
        ok = life.ready()
        return JSONResponse({"ready": ok}, 200 if ok else 503, headers=None if ok else {"Retry-After": "1"})

    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/ready", ready, methods=["GET"])
    if cfg.metrics_enabled:
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

        # Reference audio for voice cloning is larger than any JSON request.
        limit = max(MAX_UPLOAD_BYTES, self.max_body_bytes) if scope["path"] == VOICES else self.max_body_bytes
        too_large = ApiError("payload_too_large", f"request body is over {limit} bytes")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
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
                if received > limit:
                    raise too_large
            return message

        await self.app(scope, limited_receive, counted_send)
