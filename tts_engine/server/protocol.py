"""uvicorn's httptools HTTP protocol with a deadline on reading a request.

uvicorn times only the idle gap after a response (keep-alive). A client that connects and sends
nothing, or sends its headers or body a byte at a time (slowloris), held its socket and file
descriptor for as long as it liked: 2 x 10,000 such connections used every descriptor the server
had, and /health then failed. Here a connection must start a request within `keep_alive_s` of
connecting (as long as a kept-alive connection may idle) and deliver the whole of it, headers and
body, within `request_read_timeout_s` of its first byte (a request pipelined behind a response in
flight: of its turn), and start the next within `keep_alive_s` of a response; otherwise it is closed
(a request whose handler already runs then sees a disconnect: a 499 in the metrics,
server/http_speech.py). A WebSocket upgrade ends the deadline: the WebSocket protocol has its own pings.

The other way round, a client that stops reading a streamed response (without closing) filled its socket's
buffers and then the server's: the handler's `send` waited, the engine's audio for it piled up in memory
until the utterance ended, and nothing ever closed the connection. Here, once the transport has paused
writing (its buffer over the high-water mark, after the kernel's), the client must drain it below the
low-water mark within `write_stall_s` (asyncio resumes writing), or the connection is aborted (its buffer
dropped): the handler sees a disconnect, its engine stream is cancelled within one engine step (the
client-gone path), and `on_stall` counts it.

Past the connection cap (uvicorn's `limit_concurrency`, set by server/run.py from `max_connections`) uvicorn answers
a request with a bare 503; here it is the server's own (`too_many_connections`: a JSON error, Retry-After), and
`on_refused` counts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .errors import ApiError

log = logging.getLogger(__name__)
# scope key: a callable that ends a streamed response as cut short (http_speech.py), where the protocol offers it
CUT = "cadence.cut_response"


def too_many_connections(max_connections: int, on_refused: Callable[[], None] | None = None):
    """The ASGI app that answers a request past the connection cap: 503 `too_many_connections`, Retry-After 1, and
    the connection closed."""
    error = ApiError("too_many_connections", f"the server holds its limit of {max_connections} connections",
                     retry_after_s=1.0)
    body = json.dumps(error.http_body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close"), *((k.lower().encode(), v.encode()) for k, v in error.http_headers().items())]

    async def app(scope, receive, send) -> None:
        if on_refused is not None:
            on_refused()
        await send({"type": "http.response.start", "status": error.http_status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


def timed_protocol(request_read_timeout_s: float, idle_s: float, write_stall_s: float | None = None,
                   on_stall: Callable[[], None] | None = None, refused=None) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn.Config(http=...), with these deadlines (write_stall_s None: no write
    deadline). refused: the ASGI app that answers past the connection cap instead of uvicorn's
    (`too_many_connections`)."""

    class TimedHttpToolsProtocol(HttpToolsProtocol):
        _read_deadline: asyncio.TimerHandle | None = None
        _write_deadline: asyncio.TimerHandle | None = None

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._read_deadline = self.loop.call_later(seconds, self._read_timed_out)

        def _disarm(self) -> None:
            if self._read_deadline is not None:
                self._read_deadline.cancel()
                self._read_deadline = None

        def _read_timed_out(self) -> None:
            self._read_deadline = None
            if not self.transport.is_closing():
                log.info("closing a connection that did not send a whole request in time (%s)", self.client)
                self.transport.close()

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(idle_s)

        def on_message_begin(self) -> None:
            in_flight = self.cycle is not None and not self.cycle.response_complete
            super().on_message_begin()
            if not in_flight:  # a pipelined request's deadline starts with its turn (on_response_complete)
                self._arm(request_read_timeout_s)

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)
            super().on_response_complete()
            if self.transport.is_closing():
                return
            if pipelined:  # uvicorn started the next request; its body may still be on its way
                if self.cycle.more_body:
                    self._arm(request_read_timeout_s)
            else:  # idle again: bytes that start no request (a stray CRLF) must not keep it open
                self._arm(idle_s)

        def pause_writing(self) -> None:
            super().pause_writing()
            if write_stall_s is not None and self._write_deadline is None:
                self._write_deadline = self.loop.call_later(write_stall_s, self._write_stalled)

        def resume_writing(self) -> None:
            self._disarm_write()
            super().resume_writing()

        def _disarm_write(self) -> None:
            if self._write_deadline is not None:
                self._write_deadline.cancel()
                self._write_deadline = None

        def _write_stalled(self) -> None:
            self._write_deadline = None
            if not self.transport.is_closing():
                log.info("aborting a connection whose client let nothing of its response be written for %g s (%s)",
                         write_stall_s, self.client)
                if on_stall is not None:
                    on_stall()
            self.transport.abort()  # close() would wait to flush a buffer that never drains

        def _start_asgi_task(self, cycle, app) -> None:
            cycle.scope[CUT] = lambda: self._cut(cycle)
            # uvicorn picks its bare 503 past limit_concurrency (on_headers_complete); answer with the server's
            super()._start_asgi_task(cycle, refused if refused is not None and app is service_unavailable else app)

        def _cut(self, cycle) -> None:
            # What was written goes out, then the connection closes without the terminating chunk; marked
            # as the client's disconnect, so uvicorn does not log the unfinished response as a server error.
            cycle.disconnected = True
            self.transport.close()

        def handle_websocket_upgrade(self) -> None:
            self._disarm()  # the transport is the WebSocket protocol's from here
            super().handle_websocket_upgrade()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._disarm_write()
            super().connection_lost(exc)

    return TimedHttpToolsProtocol


def quiet_websocket_protocol():
    """uvicorn's sans-I/O WebSocket protocol, refusing a text message of invalid UTF-8 with close 1007 as it
    does, but without logging a traceback for it: that is the client's fault, and a client could make one
    per connection and flood the log. (Imported late: uvicorn loads its protocols lazily.)"""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class QuietUtf8Protocol(WebSocketsSansIOProtocol):
        def send_receive_event_to_app(self) -> None:
            if self.curr_msg_data_type == "text" and not self.close_sent:
                try:
                    b"".join(self.frames).decode()
                except UnicodeDecodeError as e:
                    self.frames = []
                    log.debug("closing a WebSocket whose client sent invalid UTF-8 (%s): %s", self.client, e.reason)
                    self.conn.send_close(1007, "invalid UTF-8")
                    self.handle_parser_exception()
                    return
            super().send_receive_event_to_app()

    return QuietUtf8Protocol
