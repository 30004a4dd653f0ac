"""The PACED STAND-IN LLM (not a language model): the scripted LLM with a set first-token delay and
token rate, which also tells the caller, in-band, when its first token left and when an
interruption reached it. The stamps go as transport messages (urgent, so no queue delays them): the
WebRTC data channel's app messages, or a JSON text message on the media-stream WebSocket."""

from __future__ import annotations

import time

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputTransportMessageUrgentFrame,
)
from pipecat.processors.frame_processor import FrameDirection

from agent.scripted_llm import ScriptedLLM

REPLY = ("Sure, here is a short answer read aloud by the agent, so that you can hear how quickly the "
         "voice starts and whether it flows without a break.")
FIRST_TOKEN = "llm_first_token"
INTERRUPTION = "interruption"


def stamp(kind: str) -> OutputTransportMessageUrgentFrame:
    return OutputTransportMessageUrgentFrame(message={"type": kind, "t_ms": time.monotonic() * 1e3})


class PacedLLM(ScriptedLLM):
    """Answers every turn with `reply`, its first token `first_token_s` after the request, then
    `tokens_per_s`; stamps the first token of each reply and every interruption."""

    def __init__(self, *, reply: str = REPLY, **kwargs):
        super().__init__(replies=[reply], **kwargs)
        self._stamped = True

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, InterruptionFrame):
            await super().push_frame(stamp(INTERRUPTION))
        await super().process_frame(frame, direction)

    async def push_frame(self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM):
        if isinstance(frame, LLMFullResponseStartFrame):
            self._stamped = False
        elif isinstance(frame, LLMTextFrame) and not self._stamped:
            self._stamped = True
            await super().push_frame(stamp(FIRST_TOKEN))
        await super().push_frame(frame, direction)
