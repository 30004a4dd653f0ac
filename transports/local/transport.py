"""A pipecat transport on the machine's own microphone and speaker, through sounddevice.

    microphone ─ InputStream callback ─ loop queue ─ resample to 16 kHz ─ echo policy ─ InputAudioRawFrame
    OutputAudioRawFrame (pipecat resampled it to the device's rate) ─ PlayoutBuffer ─ OutputStream callback ─ speaker

Both streams open at their device's own rate, so each direction is resampled exactly once:
the microphone to the 16 kHz that VAD and STT take, the bot's voice (by pipecat's output
transport) to the speaker's rate. `write_audio_frame` returns once the chunk is in the playout
buffer and waits while the buffer holds more than `buffer_s`, so pipecat's output paces to the
sound card. `health()` says when a device has gone (its stream stopped, or its callbacks stalled)
so that the caller can end the call instead of waiting on a dead stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

import numpy as np
import soxr
from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    StartFrame,
    TTSStartedFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from .clock import PlayoutBuffer
from .devices import Device, sounddevice
from .echo import AEC_RATE, EchoCanceller, EchoGate

PIPELINE_IN_RATE = 16000  # Silero VAD and Whisper take 16 kHz
BLOCK_S = 0.02  # PortAudio callback block
STALL_S = 5.0  # no callback for this long while running: the device is gone (a loaded machine stalls for less)
FIRST_CALLBACK_S = 15.0  # a sound server may take seconds to start a stream
CLOSE_TIMEOUT_S = 3.0  # PortAudio's close can block on a device that vanished


def _to_float(audio: bytes, channels: int) -> np.ndarray:
    x = np.frombuffer(audio, dtype=np.int16).astype(np.float32) / 32768.0
    return x.reshape(-1, channels).mean(axis=1) if channels > 1 else x  # (frames,)


def _to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)


async def _close(stream) -> None:
    if stream is None:
        return
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.to_thread(stream.close, True), CLOSE_TIMEOUT_S)


def _health(stream, last_callback_at: float | None, started_at: float, now: float) -> str | None:
    if stream is None:
        return None
    if not stream.active:
        return "its stream stopped"
    if last_callback_at is None:
        if now - started_at > FIRST_CALLBACK_S:
            return f"no audio from it in the {now - started_at:.0f} s since it was opened"
    elif now - last_callback_at > STALL_S:
        return f"no audio from it for {now - last_callback_at:.1f} s"
    return None


class SoundDeviceOutput(BaseOutputTransport):
    def __init__(self, device: Device, params: TransportParams, *, buffer_s: float = 0.1,
                 latency: float | str = 0.1, **kwargs):
        super().__init__(params, **kwargs)
        self.device = device
        self.buffer = PlayoutBuffer(device.sample_rate)
        self._buffer_frames = int(buffer_s * device.sample_rate)
        self._latency = latency
        self._stream = None
        self._started_at = 0.0
        self._marks: dict[str, int] = {}  # context id -> position of its first sample
        self.far_end: deque[tuple[np.ndarray, float]] | None = None  # (block played, its DAC time): the AEC's far end

    async def start(self, frame: StartFrame):
        await super().start(frame)
        if self._stream is None:
            sd = sounddevice()
            self._stream = sd.OutputStream(device=self.device.index, samplerate=self.device.sample_rate,
                                           channels=1, dtype="float32", latency=self._latency,
                                           blocksize=int(BLOCK_S * self.device.sample_rate),
                                           callback=self._callback)
            self._started_at = time.monotonic()
            self._stream.start()
            logger.info(f"speaker: {self.device.name} at {self.device.sample_rate} Hz, "
                        f"{self._stream.latency * 1000:.0f} ms output latency")
        await self.set_transport_ready(frame)

    def _callback(self, out, frames, time_info, status):
        delay = time_info.outputBufferDacTime - time_info.currentTime
        if time_info.outputBufferDacTime <= 0.0 or not 0.0 <= delay < 5.0:  # a host API without DAC times
            delay = self._stream.latency if self._stream is not None else 0.0
        now = time.monotonic()
        self.buffer.fill(out, delay, now)
        if self.far_end is not None:
            self.far_end.append((out[:, 0].copy(), now + delay))

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if self._stream is None:
            return False
        samples = _to_float(frame.audio, frame.num_channels)
        while self.buffer.buffered() + len(samples) > max(self._buffer_frames, len(samples)):
            if self.health() is not None:
                return False
            await asyncio.sleep(BLOCK_S / 4)
        self.buffer.write(samples)
        return True

    async def write_transport_frame(self, frame: Frame):
        if isinstance(frame, TTSStartedFrame) and frame.context_id:
            self._marks[frame.context_id] = self.buffer.written
            while len(self._marks) > 64:
                self._marks.pop(next(iter(self._marks)))

    def played_s(self, context_id: str, now: float | None = None) -> float | None:
        """Seconds of `context_id`'s audio the speaker has played by `now`; None if unknown."""
        mark = self._marks.get(context_id)
        if mark is None:
            return None
        return max(0, self.buffer.played(now) - mark) / self.device.sample_rate

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self.buffer.clear()  # pipecat drops its own queue; what waits here goes too

    def health(self, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        return _health(self._stream, self.buffer.last_callback_at, self._started_at, now)

    async def stop(self, frame: EndFrame):
        await super().stop(frame)
        await self._shut()

    async def cancel(self, frame: CancelFrame):
        await super().cancel(frame)
        await self._shut()

    async def _shut(self):
        stream, self._stream = self._stream, None
        await _close(stream)


class SoundDeviceInput(BaseInputTransport):
    def __init__(self, device: Device, params: TransportParams, *, echo: EchoGate | EchoCanceller | None = None,
                 far_end: deque[tuple[np.ndarray, float]] | None = None, far_rate: int = 0, latency: float | str = 0.1,
                 **kwargs):
        super().__init__(params, **kwargs)
        self.device = device
        self._echo = echo
        self._far_end, self._far_rate = far_end, far_rate
        self._latency = latency
        self._stream = None
        self._queue: asyncio.Queue[tuple[np.ndarray, float]] = asyncio.Queue()  # (block, its ADC time)
        self._pump_task: asyncio.Task | None = None
        self._started_at = 0.0
        self.last_callback_at: float | None = None

    async def start(self, frame: StartFrame):
        await super().start(frame)
        if self._stream is None:
            sd = sounddevice()
            loop = asyncio.get_running_loop()

            def callback(data, frames, time_info, status):
                now = self.last_callback_at = time.monotonic()
                age = time_info.currentTime - time_info.inputBufferAdcTime
                if time_info.inputBufferAdcTime <= 0.0 or not 0.0 <= age < 5.0:  # no ADC time reported
                    age = self._stream.latency if self._stream is not None else 0.0
                loop.call_soon_threadsafe(self._queue.put_nowait, (data[:, 0].copy(), now - age))

            self._stream = sd.InputStream(device=self.device.index, samplerate=self.device.sample_rate,
                                          channels=1, dtype="float32", latency=self._latency,
                                          blocksize=int(BLOCK_S * self.device.sample_rate), callback=callback)
            self._started_at = time.monotonic()
            self._stream.start()
            logger.info(f"microphone: {self.device.name} at {self.device.sample_rate} Hz")
        await self.set_transport_ready(frame)
        if self._pump_task is None:
            self._pump_task = self.create_task(self._pump())

    async def _pump(self):
        mic = soxr.ResampleStream(self.device.sample_rate, PIPELINE_IN_RATE, 1, dtype="float32")
        far = soxr.ResampleStream(self._far_rate, AEC_RATE, 1, dtype="float32") if self._far_rate else None
        while True:
            block, captured_at = await self._queue.get()
            near = _to_int16(mic.resample_chunk(block))
            if isinstance(self._echo, EchoCanceller):
                while self._far_end:
                    played, dac_at = self._far_end.popleft()
                    self._echo.add_far(_to_int16(far.resample_chunk(played)), dac_at)
                near = self._echo.process(near, captured_at)
            elif isinstance(self._echo, EchoGate):
                near = self._echo.process(near, time.monotonic())
            if len(near):
                await self.push_audio_frame(InputAudioRawFrame(audio=near.tobytes(), sample_rate=PIPELINE_IN_RATE,
                                                               num_channels=1))

    def health(self, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        return _health(self._stream, self.last_callback_at, self._started_at, now)

    async def stop(self, frame: EndFrame):
        await self._shut()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame):
        await self._shut()
        await super().cancel(frame)

    async def _shut(self):
        if self._pump_task is not None:
            await self.cancel_task(self._pump_task)
            self._pump_task = None
        stream, self._stream = self._stream, None
        await _close(stream)


class LocalAudioTransport(BaseTransport):
    """The microphone `mic` and speaker `speaker` as one pipecat transport, with an echo mode
    from echo.MODES."""

    def __init__(self, mic: Device, speaker: Device, *, echo_mode: str = "gate", canceller=None,
                 buffer_s: float = 0.1, latency: float | str = 0.1):
        from .echo import MODES

        if echo_mode not in MODES:
            raise ValueError(f"echo mode must be one of {', '.join(MODES)}, got {echo_mode!r}")
        super().__init__()
        params = TransportParams(audio_in_enabled=True, audio_in_sample_rate=PIPELINE_IN_RATE,
                                 audio_out_enabled=True, audio_out_sample_rate=speaker.sample_rate)
        self._output = SoundDeviceOutput(speaker, params, buffer_s=buffer_s, latency=latency)
        echo, far_end = None, None
        if echo_mode == "gate":
            echo = EchoGate(self._output.buffer.audible_until)
        elif echo_mode == "aec":
            echo = EchoCanceller(canceller)
            far_end = self._output.far_end = deque()
        self._input = SoundDeviceInput(mic, params, echo=echo, far_end=far_end,
                                       far_rate=speaker.sample_rate if far_end is not None else 0, latency=latency)
        self.echo_mode = echo_mode

    def input(self) -> SoundDeviceInput:
        return self._input

    def output(self) -> SoundDeviceOutput:
        return self._output

    def health(self) -> str | None:
        """What is wrong with a device, or None while both run."""
        for name, part in (("speaker", self._output), ("microphone", self._input)):
            problem = part.health()
            if problem is not None:
                return f"the {name} ({part.device.name}) was lost: {problem}"
        return None
