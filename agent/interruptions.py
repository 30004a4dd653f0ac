"""The interruption rule: while the bot speaks, a user utterance shorter than `min_speech_s` (0.5 s)
does not interrupt it (a cough, "mm-hm", a door); a longer one does. When the bot is silent, every
utterance starts a turn at once, as pipecat's default VAD start does.

Why a start strategy of our own: pipecat 1.14's `VADUserTurnStartStrategy` starts the turn (and
broadcasts the interruption) at the VAD's start, after `start_secs` (0.2 s) of speech; raising the
VAD's `start_secs` would delay every turn, not only interruptions; `MinWordsUserTurnStartStrategy`
counts words of a transcript, which a segmented STT (Whisper) only produces after the utterance
has ended, too late to interrupt while the user is talking.

Timing. The VAD reports a start `start_secs` after speech began and a stop `stop_secs` after it
ended. So if no stop has come `min_speech_s - start_secs + stop_secs` after the start, the speech
has lasted at least `min_speech_s`: the turn starts then (interrupting the bot), which is the
earliest moment that can be known. A stop before that ends a short utterance: it is ignored, and
so is its transcript when the STT delivers it (the user aggregator's pending text is reset). If
the bot stops speaking while an utterance is being timed, the turn starts at once.

Transcripts: this strategy also does the job of pipecat's `TranscriptionUserTurnStartStrategy`
(a transcript with no VAD start, e.g. typed text, starts a turn), so it replaces both defaults.
"""

from __future__ import annotations

import asyncio

from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_start.base_user_turn_start_strategy import BaseUserTurnStartStrategy


class MinSpeechInterruptionStrategy(BaseUserTurnStartStrategy):
    """Start the user's turn at the VAD start, except while the bot speaks: then only once the
    utterance has lasted `min_speech_s`."""

    def __init__(self, *, min_speech_s: float = 0.5, vad_stop_s: float = 0.2, **kwargs):
        """Args:
        min_speech_s: the shortest utterance that interrupts the bot (seconds).
        vad_stop_s: the VAD's `stop_secs` (the delay of its stop events).
        """
        if min_speech_s < 0 or vad_stop_s < 0:
            raise ValueError("min_speech_s and vad_stop_s must be >= 0")
        super().__init__(**kwargs)
        self.min_speech_s = min_speech_s
        self.vad_stop_s = vad_stop_s
        self._bot_speaking = False
        self._timer: asyncio.Task | None = None  # an utterance over the bot's speech, being timed
        self._ignored = False  # a short utterance ended: drop its transcripts until the next VAD start
        self.ignored_utterances = 0  # for logs and tests

    async def cleanup(self):
        await super().cleanup()
        await self._cancel_timer()

    async def handle_user_turn_started(self):
        await self._cancel_timer()
        self._ignored = False

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, BotStartedSpeakingFrame):
            self._bot_speaking = True
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._bot_speaking = False
            if self._timer is not None:  # nothing left to interrupt: the utterance is a turn now
                await self._start_turn()
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._ignored = False
            if not self._bot_speaking or self.min_speech_s == 0:
                await self._start_turn()
                return ProcessFrameResult.STOP
            wait = max(0.0, self.min_speech_s - frame.start_secs + self.vad_stop_s)
            await self._cancel_timer()
            self._timer = self.task_manager.create_task(self._after(wait), f"{self}::min_speech")
            return ProcessFrameResult.STOP
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            if self._timer is not None:
                await self._cancel_timer()
                self._ignored = True
                self.ignored_utterances += 1
                logger.debug(f"{self}: an utterance under {self.min_speech_s} s over the bot's speech: ignored")
                await self.trigger_reset_aggregation()  # what a streaming STT already sent of it
        elif isinstance(frame, (TranscriptionFrame, InterimTranscriptionFrame)):
            if self._ignored:  # a segmented STT (Whisper) sends the utterance's text after its end
                await self.trigger_reset_aggregation()
                return ProcessFrameResult.STOP
            if self._timer is not None:
                return ProcessFrameResult.STOP  # the timer decides, not the transcript (kept for the turn)
            await self._start_turn()
            return ProcessFrameResult.STOP
        return ProcessFrameResult.CONTINUE

    async def _after(self, wait: float):
        await asyncio.sleep(wait)
        self._timer = None
        await self.trigger_user_turn_started()

    async def _start_turn(self):
        await self._cancel_timer()
        await self.trigger_user_turn_started()

    async def _cancel_timer(self):
        timer, self._timer = self._timer, None
        if timer is not None and timer is not asyncio.current_task():
            await self.task_manager.cancel_task(timer)
