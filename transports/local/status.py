"""The live terminal line of `cadence talk`: listening / hearing you / thinking / speaking, what
was heard, and each turn's latency as heard: from the end of the user's speech to the moment the
bot's first sample reaches the speaker's DAC (the output stream's own clock), not to the moment
the audio was handed to the transport.

The end of speech is the VAD's stop minus the silence it waited for (`stop_secs`). On a terminal
the state line is redrawn in place; elsewhere (a log, a test) each change is a line of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed

ONSET_WAIT_S = 5.0  # the first sample reaches the DAC within the buffer and the device latency


class StatusLine(BaseObserver):
    def __init__(self, write: Callable[[str], None], onset_after: Callable[[float], float | None], *,
                 tty: bool = False):
        """`write(text)` puts text on the terminal; `onset_after(t)` -> the monotonic DAC time of the
        bot's first sample played after `t` (PlayoutBuffer.onset_after), or None yet."""
        super().__init__()
        self._write, self._onset_after, self._tty = write, onset_after, tty
        self._seen: deque[int] = deque(maxlen=256)  # system frames pass every processor
        self._state = ""
        self._speech_end: float | None = None
        self.turns = 0
        self.latencies: list[float] = []
        self._tasks: set[asyncio.Task] = set()

    def show(self, state: str) -> None:
        if state == self._state:
            return
        self._state = state
        self._write(f"\r\033[K{state}" if self._tty else f"{state}\n")

    def say(self, line: str) -> None:
        """A line that stays (a transcript, a latency), above the state line."""
        self._write(f"\r\033[K{line}\n{self._state}" if self._tty else f"{line}\n")

    async def on_push_frame(self, data: FramePushed):
        f = data.frame
        if f.id in self._seen:
            return
        self._seen.append(f.id)
        if isinstance(f, UserStartedSpeakingFrame):
            self.show("hearing you...")
        elif isinstance(f, VADUserStoppedSpeakingFrame):
            self._speech_end = time.monotonic() - max(0.0, time.time() - f.timestamp) - f.stop_secs
        elif isinstance(f, UserStoppedSpeakingFrame):
            self.show("thinking...")
        elif isinstance(f, TranscriptionFrame) and f.text.strip():
            self.say(f"you: {f.text.strip()}")
        elif isinstance(f, BotStartedSpeakingFrame):
            self.show("speaking...")
            if self._speech_end is not None:
                task = asyncio.get_running_loop().create_task(self._time_turn(self._speech_end))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                self._speech_end = None
        elif isinstance(f, BotStoppedSpeakingFrame):
            self.show("listening")

    async def _time_turn(self, speech_end: float) -> None:
        deadline = time.monotonic() + ONSET_WAIT_S
        while time.monotonic() < deadline:
            onset = self._onset_after(speech_end)
            if onset is not None and onset <= time.monotonic():
                self.turns += 1
                latency = onset - speech_end
                self.latencies.append(latency)
                self.say(f"turn {self.turns}: {latency:.2f} s from the end of your speech to the bot's first sound")
                return
            await asyncio.sleep(0.02)
