"""Typed records passed between the parts of a run.

`Exchange` is what a target observed for one request (raw, filled in while the request runs, so a
timed-out request still leaves what it saw); `RequestRecord` is the measured result kept in the
JSON. Latencies are seconds from the request's time zero (its first byte sent); `*_at_s` fields
are seconds from the trial's start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .playout import Chunk


@dataclass
class Exchange:
    sample_rate: int
    t0: float | None = None  # perf_counter() when the first request byte went out
    status: int | None = None  # HTTP status (WebSocket: 101 once the context is open on the wire)
    error: str | None = None  # None: the server finished the stream normally
    ttfb_s: float | None = None  # first response byte (HTTP: response headers; WS: first message of the context)
    end_s: float | None = None  # last byte of the body / the context's `done`
    chunks: list[Chunk] = field(default_factory=list)
    pcm: bytearray = field(default_factory=bytearray)
    _odd: int = 0  # a dangling byte of a sample split across two reads

    def add_pcm(self, data: bytes, now: float) -> None:
        """Append body bytes that arrived at perf_counter() `now`, counting whole samples only."""
        if self.t0 is None or not data:
            return
        self.pcm += data
        total = self._odd + len(data)
        self._odd = total % 2
        self.chunks.append(Chunk(now - self.t0, total // 2))

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
