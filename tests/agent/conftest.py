"""A real Cadence server (the engine on the tiny random-weight checkpoint) on a loopback port,
shared by the agent tests; the same ServerThread the server tests use."""

from __future__ import annotations

import pytest

from tests.server.conftest import ServerThread, real_engine
from tts_engine.server import ServerConfig


@pytest.fixture(scope="package")
def cadence_server(tiny_checkpoint):
    with ServerThread(real_engine(tiny_checkpoint), ServerConfig()) as server:
        server.wait_ready()
        yield server
