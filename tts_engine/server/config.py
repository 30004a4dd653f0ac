"""Server limits and listen address: one dataclass, built by `cadence serve` from its arguments.

Admission caps (active and queued streams) are the engine's, not the server's: the server never
queues a request of its own, it asks the engine and answers 503 when the engine says no.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    # HTTP: request bodies above this are refused with 413 (uvicorn itself has no limit).
    max_body_bytes: int = 64 * 1024
    # Characters of `input` (HTTP) or of all text appended to one context (WebSocket).
    max_text_chars: int = 5000
    # WebSocket: a bigger client message closes the connection with 1009.
    max_ws_message_bytes: int = 1024 * 1024
    max_contexts_per_connection: int = 16
    # WebSocket connections open at once; one more is closed with 1013 at connect (each holds a socket,
    # two tasks and a send buffer, whether or not its contexts hold engine streams).
    max_ws_connections: int = 1024
    # Connections open at once, HTTP and WebSocket: an HTTP request on one more (a new connection, or a kept-alive
    # one while the server holds this many) is answered 503 `too_many_connections` with Retry-After, and the
    # connection closed (server/protocol.py). Each holds a socket and a file descriptor; a flood of them must not
    # take the server's descriptors (`serve` raises the soft limit to fit, where the hard one allows).
    max_connections: int = 2048
    # WebSocket: bytes of server messages waiting for a slow client before the connection is
    # closed with 1008. 4 MiB holds about 60 s of base64 audio.
    max_ws_send_buffer_bytes: int = 4 * 1024 * 1024
    ws_ping_interval_s: float = 20.0
    ws_ping_timeout_s: float = 20.0
    # How long an idle HTTP keep-alive connection stays open (uvicorn's default is 5 s, which equals
    # httpx's client-side expiry: a request written just as the server closes the connection fails
    # with a read error, as one in 3,503 did in run 12 at 30 req/s). Longer than the idle expiry of
    # httpx (5 s) and aiohttp (15 s) clients; a client keeping idle connections longer still races.
    keep_alive_s: float = 30.0
    # A request's headers and body must all arrive within this long of its first byte (and a new
    # connection must start one within keep_alive_s), or the connection is closed: server/protocol.py.
    request_read_timeout_s: float = 10.0
    # A WebSocket context whose input is open (no `end`) and which has had no text, flush or audio for
    # this long is cancelled with an error event `context_idle`: it holds an engine slot.
    context_idle_timeout_s: float = 60.0
    # HTTP: a client that lets the server write none of its response for this long (the server's writes
    # paused: the socket's buffers full, not drained below asyncio's low-water mark) is cut off: the
    # connection aborted, its engine stream cancelled (server/protocol.py). The WebSocket's bound is
    # max_ws_send_buffer_bytes.
    http_write_stall_s: float = 30.0
    # After a WebSocket `cancel`, how long to wait for the engine's confirmation before the
    # server acknowledges the cancel anyway.
    cancel_ack_timeout_s: float = 2.0
    log_level: str = "info"

    def validate(self) -> ServerConfig:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        for name in ("max_body_bytes", "max_text_chars", "max_ws_message_bytes",
                     "max_contexts_per_connection", "max_ws_send_buffer_bytes", "max_ws_connections",
                     "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("ws_ping_interval_s", "ws_ping_timeout_s", "cancel_ack_timeout_s", "keep_alive_s",
                     "request_read_timeout_s", "context_idle_timeout_s", "http_write_stall_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_ws_send_buffer_bytes < 2 * 64 * 1024:
            raise ValueError("max_ws_send_buffer_bytes must hold at least two audio messages (128 KiB)")
        return self
