"""What the serving layer sees of the engine: small typed dataclasses and one stream handle.

No torch here. A server (HTTP, WebSocket) opens a `TTSStream` per utterance (a "context"),
appends text as it arrives, and iterates its events. The engine thread produces events; the
handle hands them to the asyncio loop that opened the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..prompt import Layout, VoiceSpec
from ..sampling import SamplingParams

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920
DEFAULT_CHUNK_SCHEDULE = (1, 2, 4, 8, 12)


@dataclass(frozen=True)
class StreamOptions:
    voice: VoiceSpec
    params: SamplingParams = field(default_factory=SamplingParams)
    # Frames per emitted chunk: the first chunk holds one audible frame, later ones grow; the last
    # entry repeats.
    chunk_schedule: tuple[int, ...] = DEFAULT_CHUNK_SCHEDULE
    # Leading silence below this level (short-window RMS, dBFS) is not sent; None keeps it.
    silence_threshold_dbfs: float | None = -45.0
    max_frames: int | None = None
    # None: non-streaming layout when the whole text is given at open, else streaming.
    layout: Layout | None = None

    def validate(self) -> StreamOptions:
        if not self.chunk_schedule or any(not isinstance(n, int) or n < 1 or n > 64
                                          for n in self.chunk_schedule):
            raise ValueError("chunk_schedule must be a non-empty list of frame counts in 1..64")
        if self.max_frames is not None and self.max_frames < 1:
            raise ValueError("max_frames must be >= 1")
        if self.silence_threshold_dbfs is not None and not -120 <= self.silence_threshold_dbfs <= 0:
            raise ValueError("silence_threshold_dbfs must be in [-120, 0]")
        self.params.validate()
        return self


@dataclass(frozen=True)
class WordTiming:
    word: str
    start_s: float  # from the start of this stream's audio
    end_s: float


@dataclass(frozen=True)
class AudioEvent:
    """A chunk of 24 kHz mono s16le PCM. `start_s`: position of its first sample in the stream."""

    stream_id: str
    index: int
    pcm: bytes
    start_s: float
    words: tuple[WordTiming, ...] = ()
    kind: Literal["audio"] = "audio"

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / SAMPLE_RATE


@dataclass(frozen=True)
class FlushDoneEvent:
    stream_id: str
    kind: Literal["flush_done"] = "flush_done"


@dataclass(frozen=True)
class DoneEvent:
    stream_id: str
    frames: int
    audio_s: float
    reason: Literal["eos", "length", "cancelled"]
    kind: Literal["done"] = "done"


@dataclass(frozen=True)
class ErrorEvent:
    stream_id: str
    message: str
    code: str = "engine_error"
    kind: Literal["error"] = "error"


StreamEvent = AudioEvent | FlushDoneEvent | DoneEvent | ErrorEvent


class AdmissionError(Exception):
    """Out of capacity: the server answers 503 with Retry-After (WebSocket: 1013 / error event)."""

    def __init__(self, message: str, retry_after_s: float = 1.0):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineUnavailable(Exception):
    """The engine is not ready, stopped, or failed: the server answers 503."""


class TTSStream(Protocol):
    id: str

    def append(self, text: str) -> None:
        """Add text (concatenated verbatim). ValueError after end_input() or past the size limit."""

    def flush(self) -> None:
        """Commit all text so far, including a trailing partial word; emits FlushDoneEvent once
        the audio for it has been sent."""

    def end_input(self) -> None:
        """No more text: the talker gets tts_eos after the last token and the stream finishes."""

    def cancel(self) -> None:
        """Stop now: GPU state is freed within one engine step; no audio event follows."""

    def report_playout(self, played_s: float, at_monotonic: float) -> None:
        """The listener has heard `played_s` seconds of this stream's audio at `at_monotonic`
        (time.monotonic() of this process). Drives the stream's playout deadline."""

    def events(self) -> AsyncIterator[StreamEvent]:
        """Audio, flush-done and finally exactly one DoneEvent or ErrorEvent."""


class Engine(Protocol):
    @property
    def ready(self) -> bool: ...

    def open_stream(self, options: StreamOptions, text: str = "", *, end_input: bool = False) -> TTSStream:
        """Admit a stream (AdmissionError when full, ValueError for bad options or text)."""

    def metrics(self) -> dict[str, float]: ...
