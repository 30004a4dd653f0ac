"""Server limits, listen address and access rules: one dataclass, built by `cadence serve` from its
arguments and the `[server]` table of its TOML file. API keys from the environment come in through
`security.with_api_keys`, the one place that reads `CADENCE_API_KEYS`.

Admission caps (active and queued streams) are the engine's, not the server's: the server never
queues a request of its own, it asks the engine and answers 503 when the engine says no.
"""

from __future__ import annotations

import ipaddress
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
    # with a read error, about one in a few thousand at 30 req/s). Longer than the idle expiry of
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

    # --- access (server/security.py, docs/security.md) ---
    # A file of API keys, one a line (`#` comments). Keys also come from CADENCE_API_KEYS (comma-separated).
    # With any key, every endpoint but /health and /ready needs `Authorization: Bearer <key>` (or a browser
    # token); with none, the server listens only on a loopback address unless allow_unauthenticated is set.
    api_keys_file: str | None = None
    api_keys: tuple[str, ...] = ()
    # Listening beyond loopback without keys: only behind a proxy that authenticates (docs/security.md).
    allow_unauthenticated: bool = False
    # Browser `Origin`s allowed besides the server's own; a request with any other Origin (or `null`) is
    # refused. Clients that send no Origin (not browsers) are not affected.
    allowed_origins: tuple[str, ...] = ()
    # Host header names accepted (DNS rebinding); empty: loopback names when listening on loopback, any
    # otherwise (keys are then required). "*": any.
    allowed_hosts: tuple[str, ...] = ()
    # Addresses of reverse proxies whose X-Forwarded-For / -Proto are believed; none by default, so a
    # client cannot pick its own address (and with it a fresh per-client quota).
    trusted_proxies: tuple[str, ...] = ()
    # /metrics at all; and whether it needs a key when keys are configured (False: it does).
    metrics_enabled: bool = True
    metrics_public: bool = False
    # Lifetime of the short-lived tokens `POST /v1/tokens` gives a browser page (no key reaches it).
    browser_token_ttl_s: float = 300.0
    # Per client (its API key, else its address): engine streams (HTTP requests and WebSocket contexts)
    # and WebSocket connections at once. Past them: `client_quota` (429). Half the engine's default
    # slots: no one client can take every slot.
    max_streams_per_client: int = 64
    max_ws_connections_per_client: int = 64
    # Cloned voices (POST /v1/voices) a client may keep, and their reference audio in all, in seconds
    # (what a voice costs the server is its prompt, which grows with the reference's length; uploads
    # in progress count). Past either: 403 `voice_quota`, until the client deletes one of its voices.
    # A client lists, reads and deletes only its own voices (server/voices.py).
    max_voices_per_client: int = 32
    max_voice_seconds_per_client: float = 480.0
    # TLS: both files, or neither (then plain HTTP; a TLS-terminating proxy is the other way).
    tls_certfile: str | None = None
    tls_keyfile: str | None = None
    # SIGINT/SIGTERM: stop admitting, /ready 503, let streams in flight finish for this long, then cancel
    # the rest with a `shutting_down` error, and exit 0.
    drain_grace_s: float = 30.0
    # An engine that fails (at warm-up, or its thread raising mid-step) stops the server, which exits 1
    # for a supervisor to restart it; /health says `failed` meanwhile. False: stay up, /health 503.
    exit_on_engine_fault: bool = True

    @property
    def loopback_only(self) -> bool:
        return is_loopback(self.host)

    def validate(self) -> ServerConfig:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        for name in ("max_body_bytes", "max_text_chars", "max_ws_message_bytes",
                     "max_contexts_per_connection", "max_ws_send_buffer_bytes", "max_ws_connections",
                     "max_connections", "max_streams_per_client", "max_ws_connections_per_client",
                     "max_voices_per_client"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("ws_ping_interval_s", "ws_ping_timeout_s", "cancel_ack_timeout_s", "keep_alive_s",
                     "request_read_timeout_s", "context_idle_timeout_s", "http_write_stall_s",
                     "browser_token_ttl_s", "max_voice_seconds_per_client"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_ws_send_buffer_bytes < 2 * 64 * 1024:
            raise ValueError("max_ws_send_buffer_bytes must hold at least two audio messages (128 KiB)")
        if not 0 <= self.drain_grace_s <= 3600:
            raise ValueError(f"drain_grace_s must be in 0..3600, got {self.drain_grace_s}")
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together: give both or neither")
        for name in ("allowed_origins", "allowed_hosts", "trusted_proxies", "api_keys"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"{name} must be a list of non-empty strings")
        for origin in self.allowed_origins:
            if origin == "null" or "://" not in origin or origin.endswith("/"):
                raise ValueError(f"allowed_origins: {origin!r} is not an origin like https://app.example.com")
        for key in self.api_keys:
            if len(key) < 16 or not key.isprintable() or " " in key:
                raise ValueError("an API key must be at least 16 printable characters without spaces")
        return self

    def check_exposure(self) -> ServerConfig:
        """Listening beyond loopback needs keys (or a stated proxy that authenticates)."""
        if not (self.loopback_only or self.api_keys or self.allow_unauthenticated):
            raise ValueError(f"listening on {self.host} needs API keys (api_keys_file or CADENCE_API_KEYS); "
                             "set allow_unauthenticated only behind a proxy that authenticates")
        return self


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
