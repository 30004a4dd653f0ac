"""The newcomer lane's planning (SchedulerConfig.newcomer_lane), a part of Scheduler. No torch.

A stream that arrives while others decode has its prefill, its frames up to its first chunk and that
chunk planned as lane steps (StepPlan.lane), which the engine runs on a CUDA stream of their own
beside the main steps in flight. The stream stays out of the main steps (StreamState.in_lane) until
its lane steps are read, so that the two streams of work never touch its slot at once.
"""

from __future__ import annotations

from .plan import Chunk, ChunkBatch, FrameBatch, FrameRow, Prefill, StepPlan
from .policy import due_chunks
from .request import Phase, StreamState


class LanePlanning:
    """Scheduler's lane methods (they use its streams, slots, in-flight steps and stats)."""

    def schedule_lane(self, now: float) -> StepPlan:
        """The newcomer lane's next step (empty: none). A queued stream enters the lane when other
        streams are decoding (alone, it gains nothing: the main steps are its own), no lane step is
        in flight, its first chunk is short and its text covers that chunk's frames; its lane steps
        hold its prefill, its frames up to the first chunk and that chunk (by default two: prefill +
        frame 0, then frame 1 + its chunk)."""
        s = self._lane
        prefills: tuple[Prefill, ...] = ()
        if s is None:
            s = self._lane_candidate()
            if s is None:
                return StepPlan(-1)
            s.slot = self.slots.allocate()
            s.phase = Phase.DECODING
            s.in_lane = True
            self._lane = s
            prefills = (Prefill(s.id, s.slot, s.prompt_len),)
            self.stats["lane_streams"] += 1
        frames = None
        if self._frame_ready(s):
            frame = s.frames_launched
            frames = FrameBatch((FrameRow(s.id, s.slot, frame, s.prompt_len + frame,
                                          s.step_text(frame, self.eos_id, self.pad_id)),), 1)
            s.frames_launched += 1
        chunks: tuple[ChunkBatch, ...] = ()
        due = due_chunks(s)[:1]  # the first chunk: the lane's last
        if due:
            (first, n), = due
            chunks = (ChunkBatch(n, (Chunk(s.id, s.slot, first, n),)),)
            s.frames_chunked += n
            s.chunks_planned += 1
        if s.chunks_planned or s.launches_over:
            self._lane = None  # planned: the lane takes the next newcomer once these steps are read
        if not prefills and frames is None and not chunks:
            return StepPlan(-1)
        plan = StepPlan(self._next_step, prefills, frames, chunks, lane=True)
        self._next_step += 1
        self.in_flight[plan.step_id] = plan
        s.lane_steps += 1
        self.stats["lane_steps"] += 1
        return plan

    def _lane_candidate(self) -> StreamState | None:
        if not self.cfg.newcomer_lane or not self.slots.num_free or any(p.lane for p in self.in_flight.values()):
            return None
        if not any(s.phase is Phase.DECODING for s in self.streams.values()):
            return None
        queued = [s for s in self.streams.values() if s.phase is Phase.QUEUED]
        if not queued:
            return None
        s = min(queued, key=lambda s: s.arrival)
        if s.chunk_schedule[0] > self.cfg.newcomer_lane_max_first_chunk:
            return None
        # Its text must cover the frames up to its first chunk: a streaming newcomer waiting for words
        # would hold the lane (and stay out of the main steps) for as long as its client pauses.
        frames = s.audible_skip + s.chunk_schedule[0]
        if any(s.step_text(f, self.eos_id, self.pad_id) is None for f in range(frames)):
            return None
        return s

    def _leave_lane(self, plan: StepPlan) -> None:
        for sid in plan.stream_ids:
            s = self.streams.get(sid)
            if s is None:
                continue
            s.lane_steps -= 1
            if s.lane_steps == 0 and s is not self._lane:
                s.in_lane = False  # its next frames come with the others'
