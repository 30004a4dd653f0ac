"""`POST /v1/audio/speech`: validate, admit, then stream the engine's events as PCM, WAV or SSE.

Order of checks (cheap first, nothing reaches the engine until the request is known good):
413 body size (middleware) -> 415 content type -> 422 UTF-8 / JSON / fields / voice / text ->
engine admission (503) -> response. The status line waits for the stream's first event, so an
engine error before any audio is still a proper status code; after that, an error ends an SSE
stream with an `error` event and cuts a raw audio stream short (no terminating chunk).

A stream that ends at the engine's context (`length` the client did not ask for) is never a success:
the whole-body response is a 422 `truncated`, an SSE stream gets an `error` event before its done, and
a raw audio stream ends without its terminating chunk. Text past what the context holds is refused up
front (engine_link.text_limit).

A client that goes away is noticed through the ASGI `http.disconnect` message (a watcher task
runs beside the sender), and its stream is cancelled at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from urllib.parse import quote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..engine.api import SAMPLE_RATE, AudioEvent, DoneEvent, ErrorEvent, StreamEvent, TTSStream
from .config import ServerConfig
from .drain import Drain
from .encoding import MEDIA_TYPES, b64, sse, wav_header
from .engine_link import ServedEngine, open_stream, text_limit, truncated
from .errors import ApiError, engine_error_code
from .metrics import ServerMetrics
from .protocol import CUT
from .quota import ClientQuota, client_of
from .schemas import SpeechRequest, check_speech_request, parse_json_object, validate_model

log = logging.getLogger(__name__)
ENDPOINT = "/v1/audio/speech"


def check_content_type(value: str | None) -> None:
    media_type = (value or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise ApiError("unsupported_media_type",
                       f"Content-Type must be application/json, got {value or 'none'!r}")


def make_speech_endpoint(engine: ServedEngine, cfg: ServerConfig, metrics: ServerMetrics,
                         quota: ClientQuota | None = None, drain: Drain | None = None):
    quota = quota or ClientQuota("streams", cfg.max_streams_per_client)
    drain = drain or Drain()

    async def create_speech(request: Request) -> SpeechResponse:
        started = time.perf_counter()
        check_content_type(request.headers.get("content-type"))
        try:
            body = await request.body()  # the body-limit middleware raises 413 past max_body_bytes
        except ClientDisconnect:
            raise ApiError("client_closed_request", "the client closed the connection before the request body "
                                                    "arrived") from None
        req = validate_model(SpeechRequest, parse_json_object(body, "request body"))
        text = check_speech_request(req, *text_limit(engine, cfg.max_text_chars))
        options = req.stream_options(engine.model_config, getattr(engine, "voices", None))
        drain.check_admit()
        client = client_of(request.scope)
        quota.acquire(client)
        try:
            stream = open_stream(engine, options, text, end_input=True)
        except BaseException:
            quota.release(client)
            raise
        return SpeechResponse(stream, req, len(text), started, metrics,
                              on_close=lambda: quota.release(client), drain=drain)

    return create_speech


class SpeechResponse(Response):
    """An ASGI response that owns one engine stream and cancels it unless it finished."""

    def __init__(self, stream: TTSStream, req: SpeechRequest, input_chars: int, started: float,
                 metrics: ServerMetrics, on_close=None, drain: Drain | None = None):
        super().__init__()
        self.on_close = on_close  # frees the client's quota once the response has run (Starlette always runs it)
        self.drain = drain
        self.shutting_down = False  # the drain stopped this stream
        self.cut = None  # the protocol's way to end a response as cut short (protocol.CUT)
        self.samples_sent = 0  # PCM samples handed to the socket: an SSE `done` reports them
        self.stream = stream
        self.req = req
        self.input_chars = input_chars
        self.started = started
        self.metrics = metrics
        self.finished = False  # the engine sent its DoneEvent / ErrorEvent
        self.first_audio_sent = False

    def _shut_down(self) -> None:
        self.shutting_down = True
        self.stream.cancel()

    def _release(self) -> None:
        if self.on_close is not None:
            self.on_close, release = None, self.on_close
            release()
        if self.drain is not None:
            self.drain.release(self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.cut = scope.get(CUT)
        try:
            await self._run(scope, receive, send)
        finally:
            self._release()

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.drain is not None:
            self.drain.hold(self, self._shut_down)
        gauge = self.metrics.streams_open.labels(ENDPOINT)
        gauge.inc()
        sender = asyncio.create_task(self._send_all(send))
        watcher = asyncio.create_task(_client_gone(receive))
        try:
            await asyncio.wait({sender, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, watcher):
                task.cancel()
            if not self.finished:
                self.stream.cancel()
            await asyncio.gather(sender, watcher, return_exceptions=True)
            gauge.dec()
        client_gone = watcher.done() and not watcher.cancelled()
        if not client_gone and sender.done() and not sender.cancelled() and sender.exception() is not None:
            raise sender.exception()

    async def _send_all(self, send: Send) -> None:
        events = self._events()
        try:
            await self._send_events(send, events)
        finally:
            await events.aclose()

    async def _send_events(self, send: Send, events: AsyncIterator[StreamEvent]) -> None:
        first = await anext(events, None)
        if isinstance(first, ErrorEvent):
            await self._refuse(send, first)
            return
        if not self.req.stream:
            await self._send_whole(send, first, events)
            return
        fmt = self.req.response_format
        media_type = "text/event-stream" if self.req.stream_format == "sse" else MEDIA_TYPES[fmt]
        await send({"type": "http.response.start", "status": 200, "headers": self._headers(media_type)})
        is_sse = self.req.stream_format == "sse"
        head = wav_header(None) if fmt == "wav" else b""
        if head and not is_sse:
            await send({"type": "http.response.body", "body": head, "more_body": True})
            head = b""
        event = first
        while event is not None:
            if isinstance(event, AudioEvent):
                data = head + event.pcm
                head = b""
                self.samples_sent += len(event.pcm) // 2
                body = sse({"type": "speech.audio.delta", "audio": b64(data)}) if is_sse else data
                await send({"type": "http.response.body", "body": body, "more_body": True})
                self._note_audio()
            elif isinstance(event, DoneEvent):
                if (failure := self._failure(event)) is not None:
                    if not is_sse:
                        log.info("stream %s: %s; its response ends without its last chunk", self.stream.id,
                                 failure.message)
                        self._cut()
                        return
                    await send({"type": "http.response.body", "more_body": True,
                                "body": sse({"type": "error", "error": failure.http_body()["error"]})})
                if is_sse:
                    await send({"type": "http.response.body", "body": self._sse_done(event, head),
                                "more_body": True})
            elif isinstance(event, ErrorEvent):
                if not is_sse:
                    log.error("stream %s failed after its response started: %s", self.stream.id,
                              event.message)
                    self._cut()
                    return
                err = ApiError(engine_error_code(event.code), event.message)
                await send({"type": "http.response.body", "more_body": True,
                            "body": sse({"type": "error", "error": err.http_body()["error"]})})
            event = await anext(events, None)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _refuse(self, send: Send, event: ErrorEvent) -> None:
        """The engine's error before any audio was sent, as the request's JSON error response; counted as a
        rejection by its code, as the errors raised before the stream opened are (app.py)."""
        err = ApiError(engine_error_code(event.code), event.message)
        self.metrics.rejections.labels(err.code).inc()
        await _send_json_error(send, err)

    async def _send_whole(self, send: Send, first: StreamEvent | None, events: AsyncIterator) -> None:
        pcm = bytearray()
        event = first
        while event is not None:
            if isinstance(event, AudioEvent):
                pcm += event.pcm
            elif isinstance(event, ErrorEvent):
                await self._refuse(send, event)
                return
            elif isinstance(event, DoneEvent) and (failure := self._failure(event)) is not None:
                self.metrics.rejections.labels(failure.code).inc()
                await _send_json_error(send, failure)
                return
            event = await anext(events, None)
        fmt = self.req.response_format
        body = (wav_header(len(pcm)) if fmt == "wav" else b"") + bytes(pcm)
        headers = [*self._headers(MEDIA_TYPES[fmt]), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        self._note_audio()

    def _cut(self) -> None:
        """End the response without its terminating chunk: the client sees it cut short, never complete."""
        if self.cut is not None:
            self.cut()

    def _failure(self, event: DoneEvent) -> ApiError | None:
        """Why a finished stream is not a success: cut at the engine's context, or stopped by the drain."""
        if self.shutting_down and event.reason == "cancelled":
            return ApiError("shutting_down", "the server shut down before this stream finished", retry_after_s=1.0)
        if truncated(event.reason, event.frames, self.req.max_frames):
            return ApiError("truncated", f"the speech reached the engine's context after {event.audio_s:.1f} s, "
                            "before the text ended: send shorter input")
        return None

    async def _events(self) -> AsyncIterator[StreamEvent]:
        """The engine's events up to and including the terminal one; marks the stream finished."""
        async for event in self.stream.events():
            if isinstance(event, DoneEvent | ErrorEvent):
                self.finished = True
                yield event
                return
            yield event

    def _headers(self, media_type: str) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", media_type.encode()),
                   (b"x-sample-rate", str(SAMPLE_RATE).encode()),
                   (b"x-stream-id", quote(self.stream.id, safe="-_.").encode()),
                   (b"cache-control", b"no-store")]
        if self.req.model is not None:
            headers.append((b"x-model", quote(self.req.model, safe="-_.:/ ").encode()))
        if self.req.stream_format == "sse":
            headers.append((b"x-accel-buffering", b"no"))
        return headers

    def _sse_done(self, event: DoneEvent, pending_head: bytes) -> bytes:
        out = b""
        if pending_head:  # a WAV stream that produced no audio still gets its header
            out = sse({"type": "speech.audio.delta", "audio": b64(pending_head)})
        done = {"type": "speech.audio.done", "duration_s": round(event.audio_s, 4), "samples": self.samples_sent,
                "reason": event.reason,
                "usage": {"input_characters": self.input_chars, "output_frames": event.frames}}
        if self.req.model is not None:
            done["model"] = self.req.model
        return out + sse(done)

    def _note_audio(self) -> None:
        if not self.first_audio_sent:
            self.first_audio_sent = True
            self.metrics.ttfa.labels(ENDPOINT).observe(time.perf_counter() - self.started)


async def _client_gone(receive: Receive) -> None:
    """Returns when the client disconnects (the request body was already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_json_error(send: Send, err: ApiError) -> None:
    body = json.dumps(err.http_body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in err.http_headers().items()]
    await send({"type": "http.response.start", "status": err.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
