"""A fake engine with the real engine's surface, for what the real one cannot be made to do on
demand: fail mid-stream, or never confirm a cancel. Frames are produced on a timer.

One frame per `frame_s` per stream; a stream speaks `1 + ceil(chars / 14.5 * 12.5)` frames of
its committed text, like a random-weight checkpoint. Audio is a 440 Hz tone.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import AsyncIterator

import numpy as np

from tts_engine.config import CONFIG_DIR, ModelConfig
from tts_engine.engine.api import (
    SAMPLE_RATE,
    SAMPLES_PER_FRAME,
    AdmissionError,
    AudioEvent,
    DoneEvent,
    EngineUnavailable,
    ErrorEvent,
    FlushDoneEvent,
    StreamEvent,
    StreamOptions,
    WordTiming,
)
from tts_engine.prompt import resolve_voice

_TONE = (0.3 * np.sin(2 * np.pi * 440 * np.arange(SAMPLES_PER_FRAME) / SAMPLE_RATE) * 32767).astype("<i2")
FRAME_PCM = _TONE.tobytes()


class FakeStream:
    _ids = itertools.count()

    def __init__(self, engine: FakeEngine, options: StreamOptions, text: str, end_input: bool):
        self.id = f"fake-{next(self._ids)}"
        self.engine = engine
        self.options = options
        self.text = text
        self.ended = end_input
        self.cancelled = False
        self.flushes = 0
        self.playout: list[tuple[float, float]] = []
        self.queue: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self.frames = 0
        self.finished = False
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task) -> None:
        # Also runs for a task cancelled before it started, whose body never ran.
        if not self.finished:
            self._finish(DoneEvent(self.id, self.frames, self.frames * 0.08, "cancelled"))
        self.engine.active.discard(self)

    def _finish(self, event: StreamEvent) -> None:
        self.finished = True
        self.queue.put_nowait(event)

    def append(self, text: str) -> None:
        if self.ended:
            raise ValueError("input has ended")
        self.text += text

    def flush(self) -> None:
        self.flushes += 1

    def end_input(self) -> None:
        self.ended = True

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if not self.engine.ignore_cancel:
                self.task.cancel()

    def report_playout(self, played_s: float, at_monotonic: float) -> None:
        self.playout.append((played_s, at_monotonic))

    async def events(self) -> AsyncIterator[StreamEvent]:
        while True:
            event = await self.queue.get()
            yield event
            if isinstance(event, DoneEvent | ErrorEvent):
                return

    async def _run(self) -> None:
        index = 0
        schedule = self.options.chunk_schedule
        flushed = 0
        while True:
            target = 1 + math.ceil(len(self.text.strip()) / 14.5 * 12.5) if self.text.strip() else 0
            if self.options.max_frames is not None:
                target = min(target, self.options.max_frames)
            limit = self.engine.context_frames
            if limit is not None:
                target = min(target, limit)
            want = schedule[min(index, len(schedule) - 1)]
            n = min(want, target - self.frames)
            if n > 0 and (n == want or self.ended or self.flushes > flushed):
                await asyncio.sleep(self.engine.frame_s * n)
                if self.engine.fail_after_frames is not None and self.frames + n > self.engine.fail_after_frames:
                    self._finish(ErrorEvent(self.id, "injected fault", "engine_error"))
                    return
                start = self.frames * SAMPLES_PER_FRAME / SAMPLE_RATE
                words = (WordTiming("word", start, start + 0.05),)
                self.queue.put_nowait(AudioEvent(self.id, index, FRAME_PCM * n, start, words))
                self.frames += n
                index += 1
                continue
            if self.flushes > flushed:
                flushed = self.flushes
                self.queue.put_nowait(FlushDoneEvent(self.id))
                continue
            if self.ended and self.frames >= target:
                reason = "length" if target in (self.options.max_frames, self.engine.context_frames) else "eos"
                self._finish(DoneEvent(self.id, self.frames, self.frames * 0.08, reason))
                return
            await asyncio.sleep(0.005)


class FakeEngine:
    def __init__(self, *, max_active_streams: int = 64, frame_s: float = 0.005):
        self.model_config = ModelConfig.from_file(CONFIG_DIR / "tiny-customvoice.config.json")
        self.max_active_streams = max_active_streams
        self.frame_s = frame_s
        self.fail_after_frames: int | None = None
        # the real engine's context, in frames: a stream reaching it ends with reason "length"
        self.context_frames: int | None = None
        self.ignore_cancel = False
        self.active: set[FakeStream] = set()
        self.opened: list[FakeStream] = []
        self.ready = False
        self.alive = True

    async def start(self) -> None:
        await asyncio.sleep(0.01)
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        for s in list(self.active):
            s.cancel()

    def open_stream(self, options: StreamOptions, text: str = "", *, end_input: bool = False) -> FakeStream:
        if not self.ready:
            raise EngineUnavailable("engine is not ready")
        options.validate()
        resolve_voice(self.model_config, options.voice)
        if len(self.active) >= self.max_active_streams:
            raise AdmissionError("all stream slots are busy", retry_after_s=0.5)
        stream = FakeStream(self, options, text, end_input)
        self.active.add(stream)
        self.opened.append(stream)
        return stream

    def metrics(self) -> dict[str, float]:
        return {"active_streams": len(self.active), "queued_streams": 0}
