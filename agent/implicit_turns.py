"""Turns outside an LLM response, for a TTS service that keeps one engine context per turn.

pipecat opens a new context per text frame outside an LLMFullResponseStart .. End pair; this mixin
makes such text join an implicit turn instead, which stays open while text keeps arriving and ends
after `implicit_turn_idle_s` without text, at the next LLM response, or at the pipeline's EndFrame.
Put it before the TTS service class in the bases (its `process_frame` runs first).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from loguru import logger
from pipecat.frames.frames import (
    AggregatedTextFrame,
    ControlFrame,
    EagerTranscriptionFrame,
    EndFrame,
    Frame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMFullResponseStartFrame,
    TextFrame,
    TranscriptionFrame,
)
from pipecat.processors.frame_processor import FrameDirection


@dataclass
class _ImplicitTurnIdleFrame(ControlFrame):
    """Internal: the implicit turn `context_id` got no text for `implicit_turn_idle_s`."""

    context_id: str = ""


class ImplicitTurns:
    def __init__(self, *args, implicit_turn_idle_s: float = 0.5, **kwargs):
        """implicit_turn_idle_s: how long text outside an LLM response may pause before its utterance is ended."""
        if implicit_turn_idle_s <= 0:
            raise ValueError(f"implicit_turn_idle_s must be > 0, got {implicit_turn_idle_s}")
        super().__init__(*args, **kwargs)
        self._implicit_turn_idle_s = implicit_turn_idle_s
        self._implicit_turn_id: str | None = None
        self._implicit_deadline = 0.0
        self._implicit_watch: asyncio.Task | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, _ImplicitTurnIdleFrame):
            if frame.context_id == self._implicit_turn_id:
                await self._complete_turn()
            return
        if isinstance(frame, LLMFullResponseStartFrame) and not frame.skip_tts and self._implicit_turn_id:
            await self._complete_turn()  # the response gets a context of its own
        elif isinstance(frame, EndFrame) and self._turn_context_id:
            # TTSService.stop() waits for every audio context to finish before the base class
            # ends the open turn, so end it first, or its last words wait for a timeout.
            await self._complete_turn()
        elif _is_spoken_text(frame):
            self._join_implicit_turn()
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._implicit_turn_id = None  # the base class dropped the turn

    def _join_implicit_turn(self) -> None:
        """Text outside an LLM response: continue the implicit turn, or start one."""
        if self._turn_context_id is None:
            self._turn_context_id = self._implicit_turn_id = str(uuid.uuid4())
        if self._turn_context_id != self._implicit_turn_id:
            return  # inside an LLM response or a TTSSpeakFrame: the base class has the turn
        self._implicit_deadline = time.monotonic() + self._implicit_turn_idle_s
        if self._implicit_watch is None or self._implicit_watch.done():
            self._implicit_watch = self.create_task(self._watch_implicit_turn(self._implicit_turn_id))

    async def _watch_implicit_turn(self, context_id: str) -> None:
        while self._implicit_turn_id == context_id:
            delay = self._implicit_deadline - time.monotonic()
            if delay <= 0:
                await self.queue_frame(_ImplicitTurnIdleFrame(context_id=context_id))
                return
            await asyncio.sleep(delay)

    async def _cancel_implicit_watch(self) -> None:
        task, self._implicit_watch = self._implicit_watch, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            await self.cancel_task(task)

    async def _complete_turn(self) -> None:
        """End the open turn as LLMFullResponseEndFrame would, without pushing that frame."""
        self._implicit_turn_id = None
        await self._cancel_implicit_watch()
        context_id = self._turn_context_id
        if context_id is None:
            return
        remaining = await self._text_aggregator.flush()
        if remaining:
            await self._handle_aggregated_text(self._aggregated_text_frame(remaining))
        await self._push_sequencer_frames(await self._aggregated_frame_sequencer.finalize(context_id), context_id)
        if self._streamed_text:
            logger.debug(f"{self}: Generating TTS [{self._streamed_text}]")
            await super().start_tts_usage_metrics(self._streamed_text)
            self._streamed_text = ""
        self._sent_non_whitespace_in_context = False
        await self.on_turn_context_completed()  # flush_audio -> `end`; clears the turn


def _is_spoken_text(frame: Frame) -> bool:
    """Text the base class would synthesize (and give a context of its own outside a turn)."""
    if not isinstance(frame, TextFrame) or frame.skip_tts:
        return False
    if isinstance(frame, AggregatedTextFrame):
        return True
    return not isinstance(frame, TranscriptionFrame | InterimTranscriptionFrame | EagerTranscriptionFrame)
