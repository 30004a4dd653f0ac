"""Per-stream scheduling state. No torch: the policy and its tests run on plain Python.

A stream moves through
    WAITING_TEXT -> QUEUED -> DECODING -> FINISHED
WAITING_TEXT: its first text token has not arrived (streaming layout) or its text is not complete
(non-streaming layout). QUEUED: ready for prefill, waiting for a slot. DECODING: owns a slot;
each frame step produces one frame, when the text that step needs is there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from ..prompt import Layout

FRAME_S = 0.08


class Phase(Enum):
    WAITING_TEXT = "waiting_text"
    QUEUED = "queued"
    DECODING = "decoding"
    FINISHED = "finished"


@dataclass
class StreamState:
    id: str
    layout: Layout
    seed: int
    max_frames: int
    forced_frames: int | None  # random-weight checkpoints: exact length, EOS masked
    chunk_schedule: tuple[int, ...]
    drop_first_frame: bool
    arrival: float = field(default_factory=time.monotonic)
    phase: Phase = Phase.WAITING_TEXT
    slot: int | None = None
    content_ids: list[int] = field(default_factory=list)  # committed text tokens t1..tN
    input_ended: bool = False
    prompt_len: int = 0
    frames_done: int = 0  # frames produced by the talker + code predictor
    frames_decoded: int = 0  # frames turned into PCM (after a dropped frame 0)
    chunks_emitted: int = 0
    audio_sent_s: float = 0.0
    first_audio_at: float | None = None
    played_s: float | None = None  # last playout report
    played_at: float | None = None
    finish_reason: str | None = None
    cancelled: bool = False

    # -- text ------------------------------------------------------------------------------
    def ready_for_prefill(self) -> bool:
        if self.layout is Layout.STREAMING:
            return bool(self.content_ids)
        return self.input_ended and bool(self.content_ids)

    def step_text(self, step: int, eos_id: int, pad_id: int) -> int | None:
        """Text id for decode step `step`, or None while it has not arrived.

        Streaming layout: step k carries t_{k+2} (content index k+1), then tts_eos once input has
        ended, then tts_pad. Non-streaming: always tts_pad."""
        if self.layout is Layout.NON_STREAMING:
            return pad_id
        i = step + 1
        if i < len(self.content_ids):
            return self.content_ids[i]
        if not self.input_ended:
            return None
        return eos_id if i == len(self.content_ids) else pad_id

    # -- frames and chunks -----------------------------------------------------------------
    @property
    def frame_limit(self) -> int:
        if self.forced_frames is None:
            return self.max_frames
        return min(self.forced_frames, self.max_frames)

    def next_chunk_frames(self) -> int:
        s = self.chunk_schedule
        return s[min(self.chunks_emitted, len(s) - 1)]

    def audible_frames_ready(self) -> int:
        """Frames produced but not yet decoded to PCM."""
        skip = 1 if self.drop_first_frame else 0
        return max(0, self.frames_done - skip - self.frames_decoded)

    # -- playout -------------------------------------------------------------------------------
    def buffered_s(self, now: float) -> float:
        """Audio the listener has received but not yet heard. Uses the transport's playout report
        when there is one; otherwise assumes a zero-buffer player that started at first audio."""
        if self.first_audio_at is None:
            return 0.0
        if self.played_s is not None and self.played_at is not None:
            heard = self.played_s + max(0.0, now - self.played_at)
        else:
            heard = now - self.first_audio_at
        return self.audio_sent_s - min(heard, self.audio_sent_s)

    def playout_deadline(self, now: float) -> float:
        """Monotonic time at which the listener's playback runs dry (now + buffered audio)."""
        return now + self.buffered_s(now)
