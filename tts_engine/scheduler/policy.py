"""Which streams run in the next engine step. No torch.

Order: streams not yet audible first (their listener is waiting for first audio), then by
playout deadline (the moment their listener's buffer runs dry), then arrival. A step runs at most
`max_batch` frame rows; prefills are admitted FIFO while slots are free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .request import Phase, StreamState


@dataclass(frozen=True)
class StepPlan:
    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


def urgency(s: StreamState, now: float) -> tuple[int, float, float]:
    audible = s.first_audio_at is not None
    return (1 if audible else 0, s.playout_deadline(now) if audible else 0.0, s.arrival)


def plan_step(streams: list[StreamState], free_slots: int, max_batch: int, max_prefills: int,
              now: float, eos_id: int, pad_id: int) -> StepPlan:
    queued = sorted((s for s in streams if s.phase is Phase.QUEUED and not s.cancelled), key=lambda s: s.arrival)
    prefill = [s.id for s in queued[: min(free_slots, max_prefills)]]
    ready = [s for s in streams if s.phase is Phase.DECODING and not s.cancelled
             and s.frames_done < s.frame_limit and s.step_text(s.frames_done, eos_id, pad_id) is not None]
    ready.sort(key=lambda s: urgency(s, now))
    return StepPlan(prefill, [s.id for s in ready[:max_batch]])
