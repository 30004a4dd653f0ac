"""Typed records passed between the parts of a run.

`Exchange` is what a target observed for one request (raw, filled in while the request runs, so a
timed-out request still leaves what it saw); `RequestRecord` is the measured result kept in the
JSON. Latencies are seconds from the request's time zero (its first byte sent); `*_at_s` fields
are seconds from the trial's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .onset import OnsetTracker, pcm16_to_float
from .playout import Chunk


@dataclass
class Exchange:
    sample_rate: int
    keep_pcm: bool = False  # keep the audio itself (for the WER pass); the onset never needs it
    t0: float | None = None  # perf_counter() when the first request byte went out
    status: int | None = None  # HTTP status (WebSocket: 101 once the context is open on the wire)
    error: str | None = None  # None: the server finished the stream normally
    ttfb_s: float | None = None  # first response byte (HTTP: response headers; WS: first message of the context)
    end_s: float | None = None  # last byte of the body / the context's `done`
    chunks: list[Chunk] = field(default_factory=list)
    pcm: bytearray = field(default_factory=bytearray)
    onset: OnsetTracker | None = None  # created with the first audio, once the sample rate is known
    _carry: bytes = b""  # a dangling byte of a sample split across two reads

    def add_pcm(self, data: bytes, now: float) -> None:
        """Body bytes that arrived at perf_counter() `now`: a playout chunk of the whole samples
        they complete, and onset detection as they stream in."""
        if self.t0 is None or not data:
            return
        if self.keep_pcm:
            self.pcm += data
        data = self._carry + data
        whole = len(data) // 2 * 2
        self._carry = data[whole:]
        self.chunks.append(Chunk(now - self.t0, whole // 2))
        if self.onset is None:
            self.onset = OnsetTracker(self.sample_rate)
        self.onset.feed(pcm16_to_float(data[:whole]))

    @property
    def onset_sample(self) -> int | None:
        return None if self.onset is None else self.onset.onset

    def since_t0(self, now: float) -> float:
        return now - self.t0 if self.t0 is not None else 0.0


@dataclass
class RequestRecord:
    index: int
    measured: bool  # False: warm-up request (sent, not counted)
    sample_rate: int
    chars: int
    sentences: int
    scheduled_at_s: float
    sent_at_s: float | None  # when the first byte actually went out (open loop: should equal scheduled)
    done_at_s: float | None
    ok: bool
    status: int | None
    error: str | None
    ttfb_s: float | None
    first_playable_s: float | None
    onset_sample: int | None
    audible_ttfa_s: float | None
    e2e_s: float | None
    audio_s: float
    rtf: float | None  # e2e_s / audio_s: < 1 means the stream finished faster than it plays
    underruns: int
    stall_total_s: float
    stall_max_s: float
    stalls: list[tuple[float, float]]  # (when the listener ran dry, stall length), seconds from t0
    chunks: list[tuple[float, int]]  # (arrival, whole samples) per read / message

    @property
    def send_lag_s(self) -> float | None:
        return None if self.sent_at_s is None else self.sent_at_s - self.scheduled_at_s
