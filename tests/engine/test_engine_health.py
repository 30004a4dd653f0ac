"""The real engine's health machinery on the tiny checkpoint: the watchdog reports a deliberately
stalled loop (metrics, /health, /ready, refused opens) and clears when it moves again; idle
invariant checks count a leaked slot; predicted-underrun admission refuses with a Retry-After."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from tests.engine.helpers import SHORT, assert_empty, collect, options, wait_until
from tts_engine.engine.api import AdmissionError, DoneEvent, EngineUnavailable
from tts_engine.engine.core import StreamingEngine
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.server import create_app


def make_engine(tiny_checkpoint, **cfg) -> StreamingEngine:
    engine = StreamingEngine(tiny_checkpoint, device="cpu", max_context=512, scheduler=SchedulerConfig(**cfg))
    asyncio.run(engine.start())
    return engine


async def get(app, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        return await client.get(path)


def test_watchdog_reports_a_stalled_loop_and_clears_when_it_moves(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint, watchdog_stall_s=0.3, max_active_streams=2)
    app = create_app(engine, manage_engine=False)
    gate, blocked = threading.Event(), threading.Event()
    launch = engine.executor.launch

    def stuck_launch(plan, entries):  # the engine thread hangs inside a step, as on a hung GPU
        blocked.set()
        gate.wait()
        return launch(plan, entries)

    engine.executor.launch = stuck_launch
    try:
        async def run():
            assert (await get(app, "/health")).json() == {"status": "ok"}
            s = engine.open_stream(options(chunk_schedule=(64,)), SHORT, end_input=True)
            await asyncio.to_thread(blocked.wait, 10)
            await asyncio.to_thread(wait_until, lambda: engine.stalled, 10.0, "the watchdog")
            m = engine.metrics()
            assert m["stalled"] == 1.0 and m["healthy"] == 0.0 and m["watchdog_stalls"] == 1
            assert m["stalled_for_s"] >= 0.3 and not engine.ready
            health = await get(app, "/health")
            assert health.status_code == 503 and health.json() == {"status": "stalled"}
            assert (await get(app, "/ready")).status_code == 503
            assert "cadence_engine_stalled 1.0" in (await get(app, "/metrics")).text
            with pytest.raises(EngineUnavailable, match="stalled"):
                engine.open_stream(options(), SHORT, end_input=True)  # new requests fail fast
            gate.set()
            events = await collect(s)
            await asyncio.to_thread(wait_until, lambda: not engine.stalled, 10.0, "the stall to clear")
            assert (await get(app, "/health")).json() == {"status": "ok"}
            return events

        events = asyncio.run(run())
        assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos"
        assert_empty(engine)
    finally:
        gate.set()
        engine.executor.launch = launch
        asyncio.run(engine.stop())


def test_an_idle_invariant_violation_is_counted_and_logged(tiny_checkpoint, caplog):
    engine = make_engine(tiny_checkpoint, max_active_streams=2)
    try:
        slot = engine.scheduler.slots.allocate()  # a slot no stream holds: a leak
        wait_until(lambda: engine.metrics()["invariant_violations"] > 0, 10.0, "the idle check")
        assert any("slots in use" in r.getMessage() for r in caplog.records)
        engine.scheduler.slots.release(slot)
        assert engine.check_invariants() == []
        assert engine.fault is None  # counted and logged, not raised (raise_on_invariant_violation is off)
    finally:
        asyncio.run(engine.stop())


def test_predicted_underrun_is_refused_before_any_work_with_retry_after(tiny_checkpoint):
    engine = make_engine(tiny_checkpoint, max_active_streams=8, reject_predicted_underrun=True)
    try:
        # What the cost model would learn on a device far too slow for more than two streams:
        # 30 ms frame steps and 120 ms for a 12-frame codec call (10 ms a frame per stream).
        cost = engine.scheduler.cost
        for _ in range(60):
            for b in engine.scheduler.buckets:
                cost.observe_frame_step(b, 0.030)
                cost.observe_chunk(12, b, 0.120)
        engine.scheduler.publish_capacity()
        n = engine.scheduler.admission.sustainable
        assert 1 <= n < 8

        async def run():
            # Streams still waiting for text run no step, so nothing re-measures the cost meanwhile.
            held = [engine.open_stream(options()) for _ in range(n)]
            with pytest.raises(AdmissionError, match="underrun") as info:
                engine.open_stream(options(), SHORT, end_input=True)
            for s in held:
                s.cancel()
            await asyncio.gather(*(collect(s) for s in held))
            return info.value

        refused = asyncio.run(run())
        assert refused.retry_after_s >= 1.0
        m = engine.metrics()
        assert m["rejected_underrun"] == 1 and m["rejected"] == 1 and m["sustainable_streams"] == n
        assert_empty(engine)
    finally:
        asyncio.run(engine.stop())
