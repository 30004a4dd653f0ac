"""Playout feedback: what the listener has heard, from the output transport back to the engine.

`PlayoutReporter` goes right after the output transport (`transport.output()`), which pushes each
audio chunk on only once it has written it, and the TTS start/stop frames in order with that
audio. So the reporter sees, per context, TTSStartedFrame(context_id), the written chunks (the
transport re-chunks audio into 10 ms multiples and drops the context id, hence the attribution by
position), then TTSStoppedFrame.

The clock: `played_s` is the audio of the context written to the transport so far, minus
`output_delay_s`. pipecat's output transports write in real time (the websocket transports sleep
one chunk per write; SmallWebRTC waits until aiortc takes each frame), so written audio is what
has left for the listener: at least what has been heard, by the client's buffer. Reporting more
than was heard only makes the engine's playout deadline earlier (conservative), never late; set
`output_delay_s` to a known client buffer (a browser jitter buffer, a telephony leg) to report
closer to what was heard. The server stamps each report with its own monotonic clock on arrival.

Reports go out at the first written chunk of a context, then every `interval_s` while it plays,
at its TTSStoppedFrame, and when the transport reports the bot stopped speaking (a stall).
"""

from __future__ import annotations

import time
from typing import Protocol

from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    Frame,
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


class PlayoutSink(Protocol):
    async def report_playout(self, context_id: str, played_s: float) -> None: ...


class PlayoutReporter(FrameProcessor):
    """Reports each TTS context's played seconds to `sink` (a CadenceTTSService)."""

    def __init__(self, sink: PlayoutSink, *, interval_s: float = 0.2, output_delay_s: float = 0.0, **kwargs):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if output_delay_s < 0:
            raise ValueError(f"output_delay_s must be >= 0, got {output_delay_s}")
        super().__init__(**kwargs)
        self._sink = sink
        self._interval_s = interval_s
        self._output_delay_s = output_delay_s
        self._context_id: str | None = None
        self._written_s = 0.0
        self._last_report: float | None = None  # time.monotonic() of the last report

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            await self._observe(frame)
        await self.push_frame(frame, direction)

    async def _observe(self, frame: Frame) -> None:
        if isinstance(frame, TTSStartedFrame):
            self._context_id = frame.context_id
            self._written_s = 0.0
            self._last_report = None
        elif isinstance(frame, TTSAudioRawFrame) and self._context_id is not None:
            self._written_s += frame.num_frames / frame.sample_rate
            if self._last_report is None or time.monotonic() - self._last_report >= self._interval_s:
                await self._report()
        elif isinstance(frame, TTSStoppedFrame) and self._context_id is not None:
            if frame.context_id in (None, self._context_id):
                await self._report()
                self._context_id = None
        elif isinstance(frame, BotStoppedSpeakingFrame) and self._context_id is not None:
            await self._report()
        elif isinstance(frame, InterruptionFrame):
            self._context_id = None  # the TTS service cancels the context itself

    async def _report(self) -> None:
        self._last_report = time.monotonic()
        played_s = max(0.0, self._written_s - self._output_delay_s)
        await self._sink.report_playout(self._context_id, played_s)
