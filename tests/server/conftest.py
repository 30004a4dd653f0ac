"""Real servers on loopback: uvicorn in a background thread, over the real engine on the tiny
random-weight checkpoint (or the fake engine, for fault injection)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
import uvicorn

from tts_engine.server import ServerConfig, create_app
from tts_engine.server.run import bind, uvicorn_config

from .fake_engine import FakeEngine


class ServerThread:
    def __init__(self, engine, cfg: ServerConfig):
        self.engine = engine
        self.cfg = replace(cfg, host="127.0.0.1", port=0, log_level="warning")
        self.app = create_app(engine, self.cfg)
        self.sock = bind(self.cfg)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/v1/stream"
        self.server = uvicorn.Server(uvicorn_config(self.app, self.cfg))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while httpx.get(self.url + "/ready").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("engine did not become ready")
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    def active_streams(self) -> int:
        return int(self.engine.metrics()["active_streams"])

    def wait_empty(self, timeout: float = 1.0) -> None:
        """The engine holds no stream within `timeout` seconds, and has found none of its invariants broken
        (the real engine checks them whenever nothing is in flight)."""
        deadline = time.monotonic() + timeout
        while self.active_streams() != 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"engine still holds {self.active_streams()} streams")
            time.sleep(0.01)
        assert self.engine.metrics().get("invariant_violations", 0) == 0, self.engine.metrics()

    def rejections(self, code: str) -> float:
        """`cadence_rejections_total{code=...}` as /metrics reports it now (0 before the first)."""
        return self.rejections_with({}, code)

    def rejections_with(self, headers: dict[str, str], code: str) -> float:
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(httpx.get(self.url + "/metrics", headers=headers).text):
            for sample in family.samples:
                if sample.name == "cadence_rejections_total" and sample.labels.get("code") == code:
                    return sample.value
        return 0.0


def real_engine(model_dir, **caps):
    from tts_engine.engine.core import StreamingEngine

    return StreamingEngine(model_dir, device="cpu", **caps)


@pytest.fixture(scope="package")
def server(tiny_checkpoint):
    """The real engine behind a server with a small per-connection context cap."""
    cfg = ServerConfig(max_contexts_per_connection=3)
    with ServerThread(real_engine(tiny_checkpoint), cfg) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def fake_server():
    with ServerThread(FakeEngine(), ServerConfig(max_ws_send_buffer_bytes=128 * 1024)) as s:
        s.wait_ready()
        yield s
