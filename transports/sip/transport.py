"""A pipecat transport on one call's RTP session (aiosipua's CallSession over aiortp).

In: aiortp's jitter buffer hands decoded 8 kHz PCM (G.711 mu-law or A-law, as negotiated) and
RFC 4733 digits to callbacks on the event loop; they are queued and pushed into the pipeline as
`InputAudioRawFrame`s (resampled once, 8 kHz -> the pipeline's 16 kHz) and `InputDTMFFrame`s.
Out: the line runs on a 20 ms clock as a phone does: each tick sends one packet of the bot's audio
or, when it is silent, of silence, so the RTP timestamps follow the wall clock. Written audio
waits in a buffer of at most `MAX_BUFFERED_S` (so writes are paced in real time, and the written
audio the playout reporter counts is at most that far ahead of the line); an interruption empties
the buffer, so the bot stops within one packet.

Each reply's latency as the line sees it, from the caller's last voiced packet to the bot's first
audio packet, is logged and kept in `RtpCallTransport.latencies` (the phone's own jitter buffer and
the network come on top).
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
from loguru import logger
from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InputDTMFFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

LINE_RATE = 8000
PACKET_S = 0.02
PACKET_BYTES = int(PACKET_S * LINE_RATE) * 2  # 16-bit PCM before G.711 encoding
MAX_BUFFERED_S = 0.04
VOICE_LEVEL = 0.02  # peak (full scale 1) above which a caller's packet counts as voiced
MAX_QUEUED_PACKETS = 250  # 5 s of caller audio; a stalled pipeline drops the oldest, never grows


class RtpInput(BaseInputTransport):
    def __init__(self, session, params: TransportParams, **kwargs):
        super().__init__(params, **kwargs)
        self._session = session
        self._queue: asyncio.Queue[bytes | str] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._resampler = create_stream_resampler()
        self.dropped = 0
        self.digits: list[str] = []  # the keys pressed, in order (for logs and tests)
        self.last_voice_at: float | None = None  # time.monotonic() of the last voiced packet

    async def start(self, frame: StartFrame):
        await super().start(frame)
        self._session.on_audio = self._on_audio
        self._session.on_dtmf = self._on_dtmf
        if self._task is None:
            self._task = self.create_task(self._pump())
        await self.set_transport_ready(frame)

    def _put(self, item: bytes | str) -> None:
        if self._queue.qsize() >= MAX_QUEUED_PACKETS:
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait(item)

    def _on_audio(self, pcm: bytes, _timestamp: int) -> None:
        if pcm and np.abs(np.frombuffer(pcm, dtype="<i2")).max() > VOICE_LEVEL * 32768:
            self.last_voice_at = time.monotonic()
        self._put(pcm)

    def _on_dtmf(self, digit: str, _duration: int) -> None:
        self._put(digit)

    async def _pump(self) -> None:
        while True:
            item = await self._queue.get()
            if isinstance(item, str):
                try:
                    frame = InputDTMFFrame(KeypadEntry(item))
                except ValueError:
                    logger.warning(f"{self}: ignored a DTMF event that is no key: {item!r}")
                    continue
                self.digits.append(item)
                await self.push_frame(frame)
                continue
            pcm = await self._resampler.resample(item, LINE_RATE, self.sample_rate)
            await self.push_audio_frame(InputAudioRawFrame(audio=pcm, sample_rate=self.sample_rate, num_channels=1))

    async def _stop(self) -> None:
        self._session.on_audio = self._session.on_dtmf = None
        if self._task is not None:
            await self.cancel_task(self._task)
            self._task = None

    async def stop(self, frame: EndFrame):
        await super().stop(frame)
        await self._stop()

    async def cancel(self, frame: CancelFrame):
        await super().cancel(frame)
        await self._stop()


class RtpOutput(BaseOutputTransport):
    def __init__(self, session, params: TransportParams, *, input: RtpInput | None = None, **kwargs):
        super().__init__(params, **kwargs)
        self._session = session
        self._input = input
        self.latencies: list[float] = []
        self._answered_voice_at: float | None = None
        self._buffer = bytearray()
        self._room = asyncio.Event()
        self._clock: asyncio.Task | None = None
        self.sent_packets = 0

    async def start(self, frame: StartFrame):
        await super().start(frame)
        if self.sample_rate != LINE_RATE:
            raise ValueError(f"the SIP line runs at {LINE_RATE} Hz; set the pipeline's audio_out_sample_rate to it")
        if self._clock is None:
            self._clock = self.create_task(self._tick())
        await self.set_transport_ready(frame)

    async def _tick(self) -> None:
        silence = bytes(PACKET_BYTES)
        next_at = time.monotonic()
        speaking = False
        while True:
            packet = bytes(self._buffer[:PACKET_BYTES]).ljust(PACKET_BYTES, b"\0") if self._buffer else silence
            if self._buffer and not speaking:
                self._reply_starts()
            speaking = bool(self._buffer)
            del self._buffer[:PACKET_BYTES]
            self._room.set()
            self._session.rtp_session.send_audio_pcm_auto(packet)
            self.sent_packets += 1
            next_at += PACKET_S
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def _reply_starts(self) -> None:
        voice_at = self._input.last_voice_at if self._input is not None else None
        if voice_at is not None and voice_at != self._answered_voice_at:  # once per caller turn
            self._answered_voice_at = voice_at
            self.latencies.append(time.monotonic() - voice_at)
            del self.latencies[:-100]
            logger.info(f"{self}: bot audio on the line {self.latencies[-1] * 1000:.0f} ms after the caller's "
                        "last voiced packet")

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        while len(self._buffer) >= MAX_BUFFERED_S * LINE_RATE * 2:
            self._room.clear()
            await self._room.wait()
        self._buffer += frame.audio
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._buffer.clear()

    async def _stop(self) -> None:
        if self._clock is not None:
            await self.cancel_task(self._clock)
            self._clock = None

    async def stop(self, frame: EndFrame):
        await super().stop(frame)
        await self._stop()

    async def cancel(self, frame: CancelFrame):
        await super().cancel(frame)
        await self._stop()


class RtpCallTransport(BaseTransport):
    """The input and output of one SIP call's media."""

    def __init__(self, session, *, name: str):
        super().__init__(input_name=f"{name}-in", output_name=f"{name}-out")
        params = TransportParams(audio_in_enabled=True, audio_out_enabled=True, audio_out_end_silence_secs=0)
        self._input = RtpInput(session, params, name=self._input_name)
        self._output = RtpOutput(session, params, input=self._input, name=self._output_name)

    def input(self) -> RtpInput:
        return self._input

    def output(self) -> RtpOutput:
        return self._output
