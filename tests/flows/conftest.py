"""A real Cadence server (the engine on the tiny random-weight checkpoint) on a loopback port whose
engine records what every stream was opened with: the engine's requests, as a flow changes voice."""

from __future__ import annotations

import pytest

from tests.server.conftest import ServerThread, real_engine
from tts_engine.server import ServerConfig

from .harness import RecordingEngine


@pytest.fixture(scope="package")
def recorded_server(tiny_checkpoint):
    engine = RecordingEngine(real_engine(tiny_checkpoint))
    with ServerThread(engine, ServerConfig()) as server:
        server.wait_ready()
        yield server


@pytest.fixture
def engine_requests(recorded_server):
    """The requests the engine gets during one test."""
    recorded_server.engine.requests.clear()
    return recorded_server.engine.requests
