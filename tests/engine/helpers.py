"""Constants and helpers shared by the engine tests (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
import torch

from tts_engine.engine.api import AudioEvent, StreamOptions
from tts_engine.engine.audio import to_s16le
from tts_engine.engine.core import StreamingEngine
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.reference import generate_codes
from tts_engine.sampling import SamplingParams
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.synthesizer import Synthesizer

SPF = 1920
SR = 24000
VOICE = VoiceSpec("ryan")
SHORT = "Hi there, friend."  # 16 frames
LONG = " ".join(["This sentence keeps the stream busy for a good while."] * 4)  # ~190 frames
TIMEOUT = 60.0


def options(seed: int = 7, **kw) -> StreamOptions:
    return StreamOptions(VOICE, SamplingParams(seed=seed), **kw)


def start_engine(path, pipeline_depth: int | None = None, codec_tick_steps: int | None = None,
                 yield_buffer_s: float = SchedulerConfig.yield_buffer_s,
                 lookahead_buffer_s: float = SchedulerConfig.lookahead_buffer_s, **caps) -> StreamingEngine:
    # Invariant violations found while idle fault the engine, so a test that breaks one fails.
    cfg = SchedulerConfig(raise_on_invariant_violation=True, pipeline_depth=pipeline_depth,
                          codec_tick_steps=codec_tick_steps, yield_buffer_s=yield_buffer_s,
                          lookahead_buffer_s=lookahead_buffer_s)
    engine = StreamingEngine(path, device="cpu", max_context=512, scheduler=cfg, **caps)
    asyncio.run(engine.start())
    return engine


def wait_until(cond: Callable[[], bool], timeout: float = TIMEOUT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def assert_empty(engine: StreamingEngine, timeout: float = 5.0) -> None:
    """No stream admitted, every slot free (free + in use == total), nothing decoding or in flight,
    no invariant violated."""
    wait_until(lambda: engine.metrics()["active_streams"] == 0, timeout, "an empty engine")
    wait_until(lambda: engine.metrics()["steps_in_flight"] == 0, timeout, "no step in flight")
    m = engine.metrics()
    assert m["decoding_streams"] == 0 and m["queued_streams"] == 0, m
    assert sorted(engine.scheduler.slots.free) == list(range(engine.max_active))
    assert not engine._entries and not engine.scheduler.streams
    assert m["invariant_violations"] == 0
    assert engine.fault is None and engine.alive


def state(engine: StreamingEngine, stream):
    entry = engine._entries.get(stream.id)
    return None if entry is None else entry.state


async def collect(stream, timeout: float = TIMEOUT) -> list:
    async def run():
        return [e async for e in stream.events()]

    return await asyncio.wait_for(run(), timeout)


async def next_event(stream, timeout: float = TIMEOUT):
    return await asyncio.wait_for(stream._events.get(), timeout)


def pcm_of(events) -> np.ndarray:
    return np.frombuffer(b"".join(e.pcm for e in events if isinstance(e, AudioEvent)), dtype="<i2")


def reference_pcm(engine: StreamingEngine, synth: Synthesizer, text: str, layout: Layout, seed: int):
    """The same request through the reference loop, frame 0 dropped (as the engine does for a
    built-in voice), decoded in one piece -> (float PCM, s16 PCM, frames)."""
    inp = synth.prepare(text, VOICE, layout=layout, params=SamplingParams(seed=seed))
    codes = generate_codes(synth.model, [inp])[0]
    with torch.inference_mode():
        pcm = engine.codec(codes[1:].T[None]).float()[0].numpy()
    return pcm, np.frombuffer(to_s16le(pcm), dtype="<i2"), len(codes)


def assert_pcm_close(got: np.ndarray, want: np.ndarray) -> None:
    assert len(got) == len(want), f"{len(got)} samples != {len(want)} ({len(got) / SPF} vs {len(want) / SPF} frames)"
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, f"max difference {diff.max()} LSB at sample {int(diff.argmax())}"
