"""Shared pieces of the agent tests: pipecat's own harness (run_test) drives the processors; the
only stand-in is a paced output transport (the audio device), never our server."""

from __future__ import annotations

import asyncio
import re
import time

from pipecat.frames.frames import Frame, OutputAudioRawFrame, StartFrame, TTSAudioRawFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams


def tokens(text: str) -> list[str]:
    """LLM-like tokens: each word with its leading space."""
    return re.findall(r"\s*\S+", text)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


class PushTimes(BaseObserver):
    """Records (time.monotonic(), source, frame) of every frame pushed downstream."""

    def __init__(self):
        super().__init__()
        self.pushed: list[tuple[float, object, Frame]] = []

    async def on_push_frame(self, data: FramePushed):
        self.pushed.append((time.monotonic(), data.source, data.frame))

    def times(self, source, frame_type) -> list[float]:
        return [t for t, s, f in self.pushed if s is source and isinstance(f, frame_type)]


class PacedOutputTransport(BaseOutputTransport):
    """An output transport that plays audio in real time, as pipecat's websocket transports do
    (one sleep per written chunk), and counts the TTS audio it wrote."""

    def __init__(self, sample_rate: int = 24000):
        super().__init__(TransportParams(audio_out_enabled=True, audio_out_sample_rate=sample_rate,
                                         audio_out_end_silence_secs=0))
        self.written_s = 0.0

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        duration = frame.num_frames / frame.sample_rate
        await asyncio.sleep(duration)
        if isinstance(frame, TTSAudioRawFrame):
            self.written_s += duration
        return True
