"""engine/profile.py: a cProfile window and a stack sampler over the engine thread, opened by its
first busy iteration."""

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
    # The sampler's view holds the engine thread alone: every stack starts at its thread's run loop.
    stacks = [line.rsplit(" ", 1) for line in (tmp_path / "engine.prof.stacks").read_text().splitlines()]
    assert stacks and all(int(n) > 0 for _, n in stacks)
    assert all("core._run" in stack.split(";") for stack, _ in stacks)
    assert any("core._step" in stack for stack, _ in stacks)
    top = (tmp_path / "engine.prof.top.txt").read_text()
    assert "samples of the engine thread" in top and "core._step" in top


def test_a_window_that_never_opened_writes_nothing(tmp_path):
    profile = EngineProfile(tmp_path / "never.prof", seconds=1)
    profile.tick(busy=False)
    profile.close()
    assert profile.done and not any(tmp_path.iterdir())


def test_the_window_closes_itself_after_its_seconds(tmp_path):
    import time

    profile = EngineProfile(tmp_path / "w.prof", seconds=0.02)
    profile.tick(busy=True)  # opens
    sum(range(1000))
    time.sleep(0.03)
    profile.tick(busy=False)  # past its seconds: written
    assert profile.done and (tmp_path / "w.prof").stat().st_size > 0
    assert (tmp_path / "w.prof.top.txt").exists() and (tmp_path / "w.prof.stacks").exists()


def test_the_sampler_sees_only_its_thread():
    import threading
    import time

    from tts_engine.engine.profile import StackSampler

    def busy_wait_here():
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            sum(range(200))

    worker = threading.Thread(target=busy_wait_here)
    worker.start()
    sampler = StackSampler(worker.ident, interval_s=0.002).start()
    worker.join()
    sampler.stop()
    total = sum(sampler.stacks.values())
    inside = sum(n for stack, n in sampler.stacks.items() if any(f.endswith(".busy_wait_here") for f in stack))
    assert total > 10 and inside >= 0.9 * total  # a sample or two may catch the thread starting or ending
    assert "busy_wait_here" in sampler.top()
