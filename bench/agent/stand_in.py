"""The PACED STAND-IN LLM (not a language model): the scripted LLM with a set first-token delay and
token rate, which also tells the caller, in-band, when its first token left and when an
interruption reached it; the TTS service's stamp of each reply's first engine audio, and the STT's
of each final transcript. The stamps go as transport messages (urgent, so no queue delays them): the
WebRTC data channel's app messages, or a JSON text message on the media-stream WebSocket."""

from __future__ import annotations

import time

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputTransportMessageUrgentFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.processors.frame_processor import FrameDirection

from agent.scripted_llm import ScriptedLLM

REPLY = ("Sure, here is a short answer read aloud by the agent, so that you can hear how quickly the "
         "voice starts and whether it flows without a break.")
FIRST_TOKEN = "llm_first_token"
INTERRUPTION = "interruption"
TTS_FIRST_AUDIO = "tts_first_audio"
STT_FINAL = "stt_final"


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


def stamp_first_engine_audio(service_class) -> None:
    """Makes `service_class` (a pipecat TTS service with audio contexts) stamp the first audio of each
    context as the engine's answer reaches it, before pipecat's queues and the transport."""
    original = service_class.append_to_audio_context

    async def append_to_audio_context(self, context_id, frame):
        stamped = self.__dict__.setdefault("_bench_stamped_contexts", set())
        if isinstance(frame, TTSAudioRawFrame) and context_id not in stamped:
            stamped.add(context_id)
            await self.push_frame(stamp(TTS_FIRST_AUDIO))
        return await original(self, context_id, frame)

    service_class.append_to_audio_context = append_to_audio_context


def stamp_final_transcripts(service_class) -> None:
    """Makes `service_class` (a pipecat STT service) stamp each final transcript as it leaves, so a
    turn's wait between the end of speech and the LLM's request splits into the recogniser's part
    and the turn-taking's."""
    original = service_class.push_frame

    async def push_frame(self, frame, direction=FrameDirection.DOWNSTREAM):
        if isinstance(frame, TranscriptionFrame):
            await original(self, stamp(STT_FINAL))
        return await original(self, frame, direction)

    service_class.push_frame = push_frame
