"""Run the app under uvicorn with the server's limits (message size, pings), TLS and proxy trust
applied, and a drain on SIGINT/SIGTERM (drain.py) before uvicorn closes anything; exit status 0."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from typing import TYPE_CHECKING

import uvicorn

from .config import ServerConfig
from .protocol import quiet_websocket_protocol, timed_protocol, too_many_connections

if TYPE_CHECKING:  # the engine's modules load with `serve`, not with the clients that `bind` through here
    from .engine_link import ServedEngine


def uvicorn_config(app, cfg: ServerConfig, **overrides) -> uvicorn.Config:
    options = dict(
        host=cfg.host, port=cfg.port, lifespan="on", log_level=cfg.log_level,
        ws=quiet_websocket_protocol(), ws_max_size=cfg.max_ws_message_bytes,
        ws_ping_interval=cfg.ws_ping_interval_s, ws_ping_timeout=cfg.ws_ping_timeout_s,
        # Audio is incompressible; deflate would only cost CPU on the event loop.
        ws_per_message_deflate=False, timeout_graceful_shutdown=5, server_header=False,
        timeout_keep_alive=cfg.keep_alive_s,
        # X-Forwarded-For only from the listed proxies: uvicorn trusts 127.0.0.1 by default, which would
        # let any local client choose its own address (and per-client quota).
        proxy_headers=bool(cfg.trusted_proxies), forwarded_allow_ips=list(cfg.trusted_proxies) or None,
        ssl_certfile=cfg.tls_certfile, ssl_keyfile=cfg.tls_keyfile,
        # uvicorn refuses a request when open connections >= limit_concurrency, its own connection counted
        limit_concurrency=cfg.max_connections + 1,
        http=timed_protocol(cfg.request_read_timeout_s, cfg.keep_alive_s, cfg.http_write_stall_s,
                            on_stall=_counter(app, lambda m: m.http_write_stalls),  # responses cut off
                            refused=too_many_connections(cfg.max_connections, _counter(
                                app, lambda m: m.rejections.labels("too_many_connections")))),
    )
    options.update(overrides)
    return uvicorn.Config(app, **options)


FAULT_EXIT_DELAY_S = 1.0


class DrainingServer(uvicorn.Server):
    """uvicorn's server, draining the app's streams (app.state.drain) before its own shutdown."""

    def __init__(self, config: uvicorn.Config, grace_s: float):
        super().__init__(config)
        self.grace_s = grace_s

    async def shutdown(self, sockets=None) -> None:
        drain = getattr(getattr(self.config.app, "state", None), "drain", None)
        if drain is not None and not self.force_exit:
            await drain.run(self.grace_s)
        await super().shutdown(sockets)


def _counter(app, count):
    """count(the app's metrics).inc if the app keeps metrics, else None."""
    metrics = getattr(getattr(app, "state", None), "metrics", None)
    return count(metrics).inc if metrics is not None else None


def fit_descriptor_limit(cfg: ServerConfig, spare: int = 256) -> str | None:
    """Raise this process's soft limit on open files to hold max_connections sockets and `spare` more (the model's
    files, the engine's pipes, logs), as far as the hard limit allows. -> a warning when it cannot (then a flood
    of connections would take the last descriptors before the cap refuses one), else None."""
    try:
        import resource
    except ImportError:  # not on POSIX: nothing to raise
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = cfg.max_connections + spare
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    if soft != resource.RLIM_INFINITY and soft < want:
        return (f"open-file limit {soft} (hard {hard}) holds fewer than max_connections {cfg.max_connections} + "
                f"{spare}: lower --max-connections or raise the limit (ulimit -n)")
    return None


def bind(cfg: ServerConfig, *, reuse_port: bool = False, listen: bool = True) -> socket.socket:
    """Listen on host:port now, so that an address in use is a clear error before the model loads.
    `reuse_port`: other processes may listen on the same port (the kernel shares connections out);
    `listen=False` leaves the listening to the server, so that none is shared out to it before it is ready."""
    family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio switches Nagle off (TCP_NODELAY) only on connections whose
    # socket says TCP, and with Nagle on, a small audio message waits for the peer's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((cfg.host, cfg.port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror}") from None
    if listen:
        sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(engine: ServedEngine, cfg: ServerConfig, sock: socket.socket | None = None) -> None:
    """Blocks until the server is stopped (Ctrl-C / SIGTERM: returns after the drain), or its engine
    fails (SystemExit with the reason, status 1, where exit_on_engine_fault)."""
    sock = sock or bind(cfg)
    if (warning := fit_descriptor_limit(cfg)) is not None:
        logging.getLogger(__name__).warning(warning)
    from .app import create_app

    app = create_app(engine, cfg)
    server = DrainingServer(uvicorn_config(app, cfg), cfg.drain_grace_s)
    if cfg.exit_on_engine_fault:
        # a second for health probes to see `failed` before the listener closes
        app.state.on_fault = lambda: asyncio.get_running_loop().call_later(FAULT_EXIT_DELAY_S, setattr, server,
                                                                           "should_exit", True)
    # uvicorn re-raises the signal it stopped on once it is done; SIGTERM's default would then kill the
    # process (status 143) after a clean drain. As KeyboardInterrupt it ends like Ctrl-C: the CLI exits 0.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        server.run(sockets=[sock])
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    if app.state.fault is not None and cfg.exit_on_engine_fault:
        raise SystemExit(f"cadence serve: {app.state.fault}")  # status 1: a supervisor restarts it


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
