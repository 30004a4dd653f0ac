"""Peer adapters on loopback: the official-package adapter as a real process on the tiny checkpoint,
and the shared server (bench/peers/server.py) in a thread over a scripted fake peer."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import uvicorn

from bench.peers.server import Job, Limits, Worker, create_app
from tts_engine.config import CONFIG_DIR, ModelConfig

FRAME = 1920  # samples per 80 ms frame at 24 kHz


def random_config(chars_per_second: float = 14.5) -> ModelConfig:
    """The tiny CustomVoice config with the `random_weights` block a made checkpoint carries."""
    raw = ModelConfig.from_file(CONFIG_DIR / "tiny-customvoice.config.json").raw
    return ModelConfig.from_dict({**raw, "random_weights": {"chars_per_second": chars_per_second}})


class FakePeer:
    """Yields one frame of a ramp per `job.frames` (or 3), in `pieces` pieces. `gate`, when given,
    must be open before each piece after the first `free` ones: tests hold a request with it."""

    name = "fake"

    def __init__(self, pieces: int = 1, fail: bool = False):
        self.pieces, self.fail = pieces, fail
        self.gate: threading.Event | None = None
        self.free = 0
        self.started: list[str] = []
        self.closed: list[str] = []
        self.yielded = 0
        self.active = 0
        self.max_active = 0

    def check(self, job: Job) -> None:
        if job.voice == "vivian":
            raise ValueError("vivian is not served here")

    def synthesize(self, job: Job) -> Iterator[np.ndarray]:
        self.started.append(job.text)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.fail:
                raise RuntimeError("the model fell over")
            frames = job.frames or 3
            for part in np.array_split(np.linspace(-0.5, 0.5, frames * FRAME, dtype=np.float32), self.pieces):
                if self.gate is not None and self.yielded >= self.free:
                    assert self.gate.wait(10), "test gate never opened"
                self.yielded += 1
                yield part
        finally:
            self.active -= 1
            self.closed.append(job.text)


class PeerThread:
    """create_app(...) under uvicorn on a free loopback port, in a daemon thread."""

    def __init__(self, peer, limits: Limits | None = None, cfg: ModelConfig | None = None):
        self.peer, self.worker = peer, Worker("test-peer")
        app = create_app(peer, self.worker, cfg or random_config(), limits or Limits())
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> PeerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def fake_peer() -> FakePeer:
    return FakePeer()
