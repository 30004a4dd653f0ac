"""engine/profile.py: a cProfile window over the engine thread, opened by its first busy iteration."""

from __future__ import annotations

import asyncio
import pstats

from tests.engine.helpers import SHORT, collect, options
from tts_engine.engine.core import StreamingEngine
from tts_engine.engine.profile import EngineProfile


def test_the_window_profiles_the_engine_thread_and_is_written_at_stop(tiny_checkpoint, tmp_path):
    path = tmp_path / "engine.prof"
    profile = EngineProfile(path, seconds=3600)  # closed by the stop, not by the clock
    engine = StreamingEngine(tiny_checkpoint, device="cpu", max_context=512, profile=profile)

    async def run():
        await engine.start()
        assert not path.exists()
        events = await collect(engine.open_stream(options(seed=1), SHORT, end_input=True))
        await engine.stop()
        return events

    asyncio.run(run())
    assert profile.done and engine.fault is None
    functions = {name for _, _, name in pstats.Stats(str(path)).stats}
    assert {"_step", "launch", "_read"} <= functions  # the engine thread's own work


def test_a_window_that_never_opened_writes_nothing(tmp_path):
    profile = EngineProfile(tmp_path / "never.prof", seconds=1)
    profile.tick(busy=False)
    profile.close()
    assert profile.done and not (tmp_path / "never.prof").exists()


def test_the_window_closes_itself_after_its_seconds(tmp_path):
    import time

    profile = EngineProfile(tmp_path / "w.prof", seconds=0.02)
    profile.tick(busy=True)  # opens
    sum(range(1000))
    time.sleep(0.03)
    profile.tick(busy=False)  # past its seconds: written
    assert profile.done and (tmp_path / "w.prof").stat().st_size > 0
