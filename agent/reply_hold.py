"""The bot's voice waits for the end of the user's sentence, its reply does not.

The user's turn ends as soon as the VAD has heard `vad_stop_s` of silence (with a transcript in
hand), so the LLM and the TTS start then. But a pause that short is often a pause inside a sentence
("I'd like to book a table, ... for two"), so `ReplyHold` keeps everything the bot would say from
the transport until the user has been quiet for `hold_s` in all. If the user speaks again first,
their speech starts a new turn and interrupts the held reply (the bot has not started speaking, so
any utterance does: agent/interruptions.py), which is dropped unheard; the next reply answers both
parts. So the LLM's first token and the TTS's first audio are spent inside the silence that
turn-taking waits for anyway, instead of after it.

Only the start of a reply is held: frames that come while the user has been quiet for less than
`hold_s`, and everything behind them (order is kept). A reply that starts later passes at once.
System frames (interruptions, the VAD's own frames) are never held, and the pipeline's end lets what
is held go first (an end frame dropped with a reply would leave the pipeline waiting for it).
"""

from __future__ import annotations

import asyncio
import time

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    StopFrame,
    SystemFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


class ReplyHold(FrameProcessor):
    """Between the TTS and the transport's output. `hold_s`: the user's silence (the VAD's stop
    delay `vad_stop_s` included) before the bot's reply may start to play."""

    def __init__(self, *, hold_s: float, vad_stop_s: float, **kwargs):
        super().__init__(**kwargs)
        self._hold_s = hold_s
        self._vad_stop_s = vad_stop_s
        self._quiet_since: float | None = None  # when the user fell silent; None while they speak
        self._held: list[Frame] = []
        self._release: asyncio.Task | None = None
        self._order = asyncio.Lock()  # a released reply goes out whole before anything behind it
        self._interruptions = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            self._quiet_since = None
            self._cancel_release()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):  # sent once the user has been quiet for stop_secs
            self._quiet_since = time.monotonic() - (frame.stop_secs or self._vad_stop_s)
            if self._held:
                self._schedule_release()
        elif isinstance(frame, InterruptionFrame | CancelFrame):
            self._held.clear()  # a reply the user spoke over before it was heard: dropped unheard
            self._interruptions += 1
            self._cancel_release()
        if direction is not FrameDirection.DOWNSTREAM or isinstance(frame, SystemFrame):
            await self.push_frame(frame, direction)
            return
        async with self._order:
            if isinstance(frame, EndFrame | StopFrame):
                self._cancel_release()
                held, self._held = self._held, []
                for earlier in held:
                    await self.push_frame(earlier)
            elif self._hold(frame):
                return
            await self.push_frame(frame, direction)

    def _hold(self, frame: Frame) -> bool:
        if not self._held:
            quiet = self._quiet_since
            if quiet is None or time.monotonic() - quiet >= self._hold_s:
                return False
            self._schedule_release()
        self._held.append(frame)
        return True

    def _schedule_release(self) -> None:
        self._cancel_release()
        if self._quiet_since is not None:
            self._release = self.create_task(self._release_at(self._quiet_since + self._hold_s))

    def _cancel_release(self) -> None:
        if self._release is not None:
            self._release.cancel()
            self._release = None

    async def _release_at(self, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        self._release = None
        async with self._order:
            held, self._held = self._held, []
            interruptions = self._interruptions
            for frame in held:
                if self._interruptions != interruptions:  # spoken over while going out: the rest is dropped
                    break
                await self.push_frame(frame)

    async def cleanup(self):
        self._cancel_release()
        await super().cleanup()
