"""An engine fault reaches every stream, also one whose open command the engine never drained."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tests.engine.helpers import options, start_engine
from tts_engine.engine.api import ErrorEvent


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the engine thread re-raises
def test_a_fault_reaches_a_stream_whose_open_was_not_yet_drained(tiny_checkpoint):
    engine = start_engine(tiny_checkpoint, max_active_streams=2)
    gate = threading.Event()

    def faulty_step() -> bool:  # the loop is parked here, before it drains the next commands
        gate.wait()
        raise RuntimeError("injected fault")

    engine._step = faulty_step
    engine._wake.set()

    async def run():
        stream = engine.open_stream(options(), "Hello there.", end_input=True)
        gate.set()
        return await asyncio.wait_for(_events(stream), timeout=10)

    events = asyncio.run(run())
    assert len(events) == 1 and isinstance(events[0], ErrorEvent), events
    assert "injected fault" in events[0].message and events[0].code == "engine_error"
    assert isinstance(engine.fault, RuntimeError)
    # The thread re-raises after the error reached the streams: let it end here, under this test's
    # filter, not as a warning charged to whichever test runs next.
    engine._thread.join(timeout=10)
    assert not engine._thread.is_alive()


async def _events(stream) -> list:
    return [e async for e in stream.events()]
