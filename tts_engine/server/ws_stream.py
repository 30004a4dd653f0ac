"""`/v1/stream`: input-streaming WebSocket, many contexts (utterances) per connection.

Tasks of one connection:
  reader   the only task that receives; handles each client message synchronously (engine calls
           do not block), so messages take effect in the order they were sent
  pump     one per context: engine events -> encoded messages -> outbox
  writer   the only task that sends: outbox -> socket, in order
The outbox is bounded in bytes; overflowing it (a client that does not read) closes the
connection with 1008. Cancelling a context drops its queued audio and makes its pump drop any
later audio, so after the cancel's acknowledgement (`done` with reason "cancelled") nothing of
it is sent. The connection ending, however it ends, cancels every context it still holds.

Each context counts against its client's stream quota (quota.py) while it holds an engine stream, and
is held by the drain (drain.py), which may stop it with a `shutting_down` error. Only progress keeps a
context with open input alive: text to speak or audio out; empty appends and flushes do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from starlette.websockets import WebSocket, WebSocketDisconnect

from ..engine.api import AudioEvent, DoneEvent, ErrorEvent, FlushDoneEvent, StreamEvent, TTSStream
from .config import ServerConfig
from .drain import Drain
from .encoding import b64
from .engine_link import ServedEngine, engine_alive, open_stream, text_limit, truncated
from .errors import ApiError, engine_error_code
from .metrics import ServerMetrics
from .quota import ClientQuota
from .schemas import (
    AppendMessage,
    ContextMessage,
    OpenMessage,
    PlayoutMessage,
    check_text,
    parse_client_message,
    parse_json_object,
    speakable,
)
from .ws_outbox import Outbox, OutMessage

log = logging.getLogger(__name__)
ENDPOINT = "/v1/stream"
# Messages a cancel drops from the outbox; `done` / `error` (the terminal message) never are.
CANCELLABLE = frozenset({"audio", "timestamps", "flush_done"})
# A close frame waits behind what is already buffered for the client; a client that reads
# nothing for this long gets no close frame (its streams were cancelled before, in any case).
CLOSE_TIMEOUT_S = 10.0


@dataclass(eq=False)
class Context:
    id: str
    stream: TTSStream
    opened: float  # perf_counter() when the open message was handled
    timestamps: bool
    max_frames: int | None = None  # the client's own frame limit: a `length` end within it is no truncation
    chars: int = 0
    has_text: bool = False  # any non-whitespace text so far
    audio_s: float = 0.0  # audio queued for the client
    samples: int = 0  # PCM samples queued for the client: its `done` reports them
    ended: bool = False
    cancelled: bool = False
    shutting_down: bool = False  # stopped by the drain
    first_audio: bool = True
    pump: asyncio.Task | None = None
    ack_deadline: asyncio.Timeout | None = field(default=None, repr=False)
    # monotonic time of its last text to speak or audio: an open input idle past
    # `context_idle_timeout_s` is cancelled (`_idle_loop`)
    active_at: float = field(default_factory=time.monotonic)


class Connection:
    def __init__(self, ws: WebSocket, engine: ServedEngine, cfg: ServerConfig, metrics: ServerMetrics, *,
                 streams: ClientQuota | None = None, drain: Drain | None = None, client: str = "unknown"):
        self.ws = ws
        self.streams = streams or ClientQuota("streams", cfg.max_streams_per_client)
        self.drain = drain or Drain()
        self.client = client
        self.max_chars, self.max_chars_why = text_limit(engine, cfg.max_text_chars)
        self.engine = engine
        self.cfg = cfg
        self.metrics = metrics
        self.contexts: dict[str, Context] = {}
        # Finished context ids, so a late cancel / playout for them is not an error.
        self.finished: OrderedDict[str, None] = OrderedDict()
        self.outbox = Outbox(cfg.max_ws_send_buffer_bytes)
        self.close: tuple[int, str] | None = None  # set when the server decides to close
        self._closing = asyncio.Event()

    async def refuse(self, code: int, reason: str) -> None:
        """Accept the handshake only to close at once with `code` (a browser sees no reason for a refused
        handshake)."""
        await self.ws.accept()
        await self._send_close(code, reason)

    async def run(self) -> None:
        if not (self.engine.ready and engine_alive(self.engine)):
            await self.refuse(1013, "engine not ready")
            return
        await self.ws.accept()
        self.metrics.ws_connections.inc()
        reader = asyncio.create_task(self._read_loop())
        writer = asyncio.create_task(self._write_loop())
        closing = asyncio.create_task(self._closing.wait())
        idle = asyncio.create_task(self._idle_loop())
        try:
            await asyncio.wait({reader, writer, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, writer, closing, idle):
                task.cancel()
            pumps = self._cancel_all()
            await asyncio.gather(reader, writer, closing, idle, *pumps, return_exceptions=True)
            self.metrics.ws_connections.dec()
        for task in (reader, writer):
            exc = task.exception() if task.done() and not task.cancelled() else None
            if self.close is None and exc is not None and not _is_disconnect(exc):
                log.error("WebSocket connection failed", exc_info=exc)
                self.close = (1011, "internal error")
        if self.close is not None:
            await self._send_close(*self.close)

    # --- reader ---------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                self.metrics.ws_closes.labels(str(message.get("code", 1005))).inc()
                return
            text = message.get("text")
            if text is None:
                self._send_error(ApiError("binary_frame", "binary frames are not accepted: send JSON text"))
                continue
            if len(text) > self.cfg.max_ws_message_bytes or (
                    4 * len(text) > self.cfg.max_ws_message_bytes
                    and len(text.encode("utf-8", "surrogatepass")) > self.cfg.max_ws_message_bytes):
                self._fail(1009, f"message over {self.cfg.max_ws_message_bytes} bytes")
                return
            context_id = None
            try:
                obj = parse_json_object(text, "message")
                context_id = obj.get("context_id") if isinstance(obj.get("context_id"), str) else None
                self._handle(obj)
            except ApiError as e:
                if e.failure.ws_close is not None:
                    self._fail(e.failure.ws_close, e.message)
                    return
                self.metrics.rejections.labels(e.code).inc()
                self._send_error(e, context_id)
            except Exception:
                log.exception("failed to handle a WebSocket message")
                self._send_error(ApiError("internal_error", "the server failed to handle this message"),
                                 context_id)

    def _handle(self, obj: dict) -> None:
        msg = parse_client_message(obj)
        if isinstance(msg, OpenMessage):
            self._open(msg)
            return
        ctx = self.contexts.get(msg.context_id)
        if ctx is None:
            if msg.context_id in self.finished and msg.type in ("cancel", "playout"):
                return  # the context finished while this message was on its way
            state = "has finished" if msg.context_id in self.finished else "is not open"
            raise ApiError("unknown_context", f"context {msg.context_id!r} {state}")
        if isinstance(msg, AppendMessage):
            self._append(ctx, msg.text)
        elif isinstance(msg, PlayoutMessage):
            # No more can have been heard than was sent: an unbounded value would put this stream
            # first in every deadline sort.
            ctx.stream.report_playout(min(msg.played_s, ctx.audio_s), time.monotonic())
        elif isinstance(msg, ContextMessage) and msg.type == "cancel":
            self._cancel(ctx)
        elif ctx.cancelled:
            return  # flush / end of a cancelled context: nothing left to do
        elif msg.type == "end":
            if not ctx.has_text:
                raise ApiError("invalid_request", f"context {ctx.id!r} has no text to speak: append text "
                               "before end, or cancel it")
            if not ctx.ended:
                ctx.ended = True
                _engine_call(ctx.stream.end_input)
        elif msg.type == "flush":
            if ctx.ended:
                raise ApiError("input_ended", f"context {ctx.id!r} has ended its input")
            _engine_call(ctx.stream.flush)

    def _open(self, msg: OpenMessage) -> None:
        if msg.context_id in self.contexts:
            raise ApiError("duplicate_context", f"context {msg.context_id!r} is already open")
        if len(self.contexts) >= self.cfg.max_contexts_per_connection:
            raise ApiError("too_many_contexts", f"{len(self.contexts)} contexts are open on this "
                           f"connection; the limit is {self.cfg.max_contexts_per_connection}")
        text = check_text(msg.text, self.max_chars, param="text", empty_ok=True, why=self.max_chars_why)
        if msg.end and not speakable(text):
            raise ApiError("invalid_request", "open with end: true needs text to speak", param="text")
        options = msg.stream_options(self.engine.model_config, getattr(self.engine, "voices", None))
        self.drain.check_admit()
        self.streams.acquire(self.client)
        try:
            stream = open_stream(self.engine, options, text, end_input=msg.end)
        except BaseException:
            self.streams.release(self.client)
            raise
        ctx = Context(msg.context_id, stream, time.perf_counter(), msg.timestamps, max_frames=msg.max_frames,
                      chars=len(msg.text), has_text=speakable(text), ended=msg.end)
        self.drain.hold(ctx, lambda: self._shut_down(ctx))
        self.contexts[ctx.id] = ctx
        self.finished.pop(ctx.id, None)
        self.metrics.streams_open.labels(ENDPOINT).inc()
        ctx.pump = asyncio.create_task(self._pump(ctx))
        # a done callback, not the pump's `finally`: a pump cancelled before it first ran has none
        ctx.pump.add_done_callback(lambda _task: self._release(ctx))

    def _append(self, ctx: Context, text: str) -> None:
        if ctx.cancelled:
            return
        if ctx.ended:
            raise ApiError("input_ended", f"context {ctx.id!r} has ended its input")
        room = self.max_chars - ctx.chars
        if len(text) > room:
            raise ApiError("text_too_long", f"context {ctx.id!r} would have {ctx.chars + len(text)} "
                           f"characters; the limit is {self.max_chars} ({self.max_chars_why})", param="text")
        ctx.chars += len(text)
        text = check_text(text, room, param="text", empty_ok=True)
        if speakable(text):
            ctx.has_text = True
            ctx.active_at = time.monotonic()
        _engine_call(ctx.stream.append, text)

    def _cancel(self, ctx: Context) -> None:
        if ctx.cancelled:
            return
        ctx.cancelled = True
        self.outbox.purge(ctx.id, CANCELLABLE)
        ctx.stream.cancel()
        if ctx.ack_deadline is not None:
            ctx.ack_deadline.reschedule(asyncio.get_running_loop().time() + self.cfg.cancel_ack_timeout_s)

    def _release(self, ctx: Context) -> None:
        self.streams.release(self.client)
        self.drain.release(ctx)

    def _shut_down(self, ctx: Context) -> None:
        if ctx.cancelled:
            return
        ctx.shutting_down = True
        self._cancel(ctx)
        self._send_error(ApiError("shutting_down", "the server shut down before this context finished"), ctx.id)

    def _cancel_all(self) -> list[asyncio.Task]:
        pumps = []
        for ctx in list(self.contexts.values()):
            ctx.cancelled = True
            ctx.stream.cancel()
            if ctx.pump is not None:
                ctx.pump.cancel()
                pumps.append(ctx.pump)
        return pumps

    async def _idle_loop(self) -> None:
        """Cancels contexts whose input is still open but which have had no text, flush or audio for
        `context_idle_timeout_s`: each holds an engine slot, and a few connections of idle contexts
        would otherwise fill the admission caps for everyone."""
        limit = self.cfg.context_idle_timeout_s
        while True:
            await asyncio.sleep(min(limit / 4, 5.0))
            now = time.monotonic()
            for ctx in list(self.contexts.values()):
                if not (ctx.ended or ctx.cancelled) and now - ctx.active_at > limit:
                    self.metrics.rejections.labels("context_idle").inc()
                    self._send_error(ApiError("context_idle", f"context {ctx.id!r} had no text to speak nor audio "
                                              f"for {limit:g} s with its input open: cancelled"), ctx.id)
                    self._cancel(ctx)

    # --- pumps ----------------------------------------------------------------------------

    async def _pump(self, ctx: Context) -> None:
        terminal = False
        try:
            async with asyncio.timeout(None) as ctx.ack_deadline:
                if ctx.cancelled:  # cancelled before this task first ran
                    ctx.ack_deadline.reschedule(asyncio.get_running_loop().time()
                                                + self.cfg.cancel_ack_timeout_s)
                async for event in ctx.stream.events():
                    if self._forward(ctx, event):
                        terminal = True
                        break
        except TimeoutError:
            log.warning("context %s: the engine did not confirm the cancel within %.1f s", ctx.id,
                        self.cfg.cancel_ack_timeout_s)
            self._put(ctx, "done", self._done(ctx, round(ctx.audio_s * 12.5), ctx.audio_s, "cancelled"))
            terminal = True
        finally:
            if not terminal:
                ctx.stream.cancel()
            self.contexts.pop(ctx.id, None)
            self.finished[ctx.id] = None
            while len(self.finished) > 4 * self.cfg.max_contexts_per_connection:
                self.finished.popitem(last=False)
            self.metrics.streams_open.labels(ENDPOINT).dec()

    def _forward(self, ctx: Context, event: StreamEvent) -> bool:
        """Queue the messages for one engine event; True for the terminal event."""
        if isinstance(event, AudioEvent):
            if ctx.cancelled:
                return False
            ctx.audio_s += event.duration_s
            ctx.samples += len(event.pcm) // 2
            ctx.active_at = time.monotonic()
            self._put(ctx, "audio", {
                "type": "audio", "context_id": ctx.id, "index": event.index, "audio": b64(event.pcm),
                "start_s": round(event.start_s, 6), "duration_s": round(event.duration_s, 6)})
            if event.words and ctx.timestamps:
                self._put(ctx, "timestamps", {
                    "type": "timestamps", "context_id": ctx.id,
                    "words": [{"word": w.word, "start_s": round(w.start_s, 6), "end_s": round(w.end_s, 6)}
                              for w in event.words]})
            return False
        if isinstance(event, FlushDoneEvent):
            if not ctx.cancelled:
                self._put(ctx, "flush_done", {"type": "flush_done", "context_id": ctx.id})
            return False
        if isinstance(event, DoneEvent):
            reason = "cancelled" if ctx.cancelled else event.reason
            if truncated(reason, event.frames, ctx.max_frames):
                self.metrics.rejections.labels("truncated").inc()
                self._put(ctx, "error", ApiError("truncated", f"the speech reached the engine's context after "
                                                 f"{event.audio_s:.1f} s, before the text ended").ws_event(ctx.id))
            self._put(ctx, "done", self._done(ctx, event.frames, event.audio_s, reason))
            return True
        if isinstance(event, ErrorEvent):
            err = ApiError(engine_error_code(event.code), event.message)
            if ctx.first_audio:  # refused before any audio (e.g. its prompt is longer than the context)
                self.metrics.rejections.labels(err.code).inc()
            self._put(ctx, "error", err.ws_event(ctx.id))
            self._put(ctx, "done", self._done(ctx, round(ctx.audio_s * 12.5), ctx.audio_s, "error"))
            return True
        return False

    @staticmethod
    def _done(ctx: Context, frames: int, audio_s: float, reason: str) -> dict:
        """`samples`: the PCM samples the server queued for this context, for the client to check."""
        return {"type": "done", "context_id": ctx.id, "frames": frames, "audio_s": round(audio_s, 6),
                "samples": ctx.samples, "reason": reason}

    # --- writer ---------------------------------------------------------------------------

    def _put(self, ctx: Context | None, kind: str, message: dict) -> None:
        if self._closing.is_set():
            return
        ttfa_from = None
        if kind == "audio" and ctx is not None and ctx.first_audio:
            ctx.first_audio = False
            ttfa_from = ctx.opened
        out = OutMessage(ctx.id if ctx else None, json.dumps(message, separators=(",", ":")), kind, ttfa_from)
        if not self.outbox.put(out):
            self._fail(1008, "slow consumer: send buffer full")

    def _send_error(self, err: ApiError, context_id: str | None = None) -> None:
        self._put(None, "error", err.ws_event(context_id))

    async def _write_loop(self) -> None:
        while True:
            msg = await self.outbox.get()
            await self.ws.send_text(msg.text)
            if msg.ttfa_from is not None:
                self.metrics.ttfa.labels(ENDPOINT).observe(time.perf_counter() - msg.ttfa_from)

    # --- closing --------------------------------------------------------------------------

    def _fail(self, code: int, reason: str) -> None:
        if self.close is None:
            self.close = (code, reason)
        self._closing.set()

    async def _send_close(self, code: int, reason: str) -> None:
        self.metrics.ws_closes.labels(str(code)).inc()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(code, reason[:120]), CLOSE_TIMEOUT_S)


def _engine_call(fn, *args) -> None:
    try:
        fn(*args)
    except ValueError as e:
        raise ApiError("invalid_request", str(e)) from None


def _is_disconnect(exc: BaseException) -> bool:
    return isinstance(exc, WebSocketDisconnect | OSError)
