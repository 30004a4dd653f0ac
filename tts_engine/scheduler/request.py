"""Per-stream scheduling state. No torch: the policy and its tests run on plain Python.

A stream moves through
    WAITING_TEXT -> QUEUED -> DECODING -> FINISHED
WAITING_TEXT: its first text token has not arrived (streaming layout) or its text is not complete
(non-streaming layout). QUEUED: its prompt is known, it waits for a slot and its prefill. DECODING:
owns a slot; each frame step produces one frame, when the text that step needs is there.

Frame counters (absolute frame indices; frame 0 of a built-in voice is dropped, `audible_skip`):
    frames_decoded + skip  <=  frames_done  <=  frames_launched
frames_launched: frame steps launched (on CUDA the newest may still run: its EOS is not known yet).
frames_done: frames whose codes the host has read and found not to be EOS.
frames_chunked: audible frames handed to the codec, possibly before their EOS check (a chunk that
  turns out to hold the EOS frame is cut there: the codec is causal, so the cut is exact).
frames_decoded: audible frames whose PCM has been delivered.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from ..prompt import Layout

FRAME_S = 0.08  # audio per frame (12.5 Hz)


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
    slot_at: float | None = None  # when it got its slot
    content_ids: list[int] = field(default_factory=list)  # committed text tokens t1..tN
    input_ended: bool = False
    prompt_len: int = 0
    frames_launched: int = 0
    frames_done: int = 0
    frames_chunked: int = 0
    frames_decoded: int = 0
    eos_frame: int | None = None  # index of the frame whose codebook 0 was EOS
    chunks_planned: int = 0
    chunks_emitted: int = 0  # chunks whose PCM was delivered
    audio_sent_s: float = 0.0
    first_audio_at: float | None = None
    played_s: float | None = None  # last playout report
    played_at: float | None = None
    finish_reason: str | None = None
    cancelled: bool = False
    # Frame counts (absolute) that each pending flush waits for.
    flush_targets: deque[int] = field(default_factory=deque)
    skipped_steps: int = 0  # consecutive steps this stream could have run but did not

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

    @property
    def audible_skip(self) -> int:
        return 1 if self.drop_first_frame else 0

    @property
    def end_frame(self) -> int:
        """Frames the stream has at most: its EOS frame once known, else its frame limit."""
        return self.eos_frame if self.eos_frame is not None else self.frame_limit

    @property
    def end_certain(self) -> bool:
        """The last frame is known: EOS was read, or every frame up to the limit is confirmed."""
        return self.eos_frame is not None or self.frames_done >= self.frame_limit

    @property
    def launches_over(self) -> bool:
        """No further frame step will be launched for this stream."""
        return self.eos_frame is not None or self.frames_launched >= self.frame_limit

    def audible_frames_ready(self) -> int:
        """Audible frames launched (and not past the end) but not yet handed to the codec."""
        return max(0, min(self.frames_launched, self.end_frame) - self.audible_skip) - self.frames_chunked

    # -- playout -------------------------------------------------------------------------------
    @property
    def audible(self) -> bool:
        return self.first_audio_at is not None

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
        """Monotonic time at which the listener's playback runs dry: now + buffered audio, or, once
        it has run dry, the moment it did (in the past), so that under overload the stream starved
        longest goes first instead of ties broken by arrival for ever."""
        if self.first_audio_at is None:
            return now
        if self.played_s is not None and self.played_at is not None:
            return self.played_at + (self.audio_sent_s - self.played_s)
        return self.first_audio_at + self.audio_sent_s
