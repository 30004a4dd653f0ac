"""What the scheduler asks the engine to run, and what comes back. No torch.

One engine step = one `StepPlan`, launched in this order:
  prefills    each fills one slot from its prompt (ModelRunner.prefill)
  frames      one frame step for a batch of slots, padded to a captured bucket: sample codebook 0,
              the 15 code-predictor steps and the talker position (ModelRunner.frame_step_async: on
              CUDA two graphs, the codes half and the talker half, replayed back to back)
  chunks      codec calls, one per ChunkBatch (CodecRunner.launch); a chunk may hold frames of this
              very step's frame batch: the codes never leave the device, and the codec waits for
              them (stream order, or an explicit wait with its own CUDA stream)
The engine reads the step's codebook-0 column (EOS) and PCM back when the step has completed, and
hands the scheduler a `StepResult`; `Scheduler.postprocess` turns it into `Output`s (audio to send,
flushes done, streams finished).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Prefill:
    stream_id: str
    slot: int
    prompt_len: int  # prompt rows


@dataclass(frozen=True)
class FrameRow:
    stream_id: str
    slot: int
    frame: int  # index of the frame this row produces
    position: int  # talker position its feedback is written at (prompt_len + frame)
    text_id: int  # text-track id added to that talker step


@dataclass(frozen=True)
class FrameBatch:
    rows: tuple[FrameRow, ...]
    bucket: int  # captured batch size the step runs at; rows beyond len(rows) are padding


@dataclass(frozen=True)
class Chunk:
    stream_id: str
    slot: int
    first_frame: int  # absolute frame index of its first frame
    num_frames: int


@dataclass(frozen=True)
class ChunkBatch:
    """One codec call over distinct streams, `num_frames` long. A stream's final chunk may be
    shorter: the executor pads it by repeating its last frame, and only its own frames' audio is
    sent (the codec is causal; the slot's state past the end is never read)."""

    num_frames: int
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True)
class StepPlan:
    step_id: int
    prefills: tuple[Prefill, ...] = ()
    frames: FrameBatch | None = None
    chunks: tuple[ChunkBatch, ...] = ()  # in launch order: a stream's later chunk sits in a later batch

    @property
    def empty(self) -> bool:
        return not self.prefills and self.frames is None and not self.chunks

    @property
    def stream_ids(self) -> set[str]:
        ids = {p.stream_id for p in self.prefills} | {c.stream_id for b in self.chunks for c in b.chunks}
        if self.frames is not None:
            ids |= {r.stream_id for r in self.frames.rows}
        return ids


@dataclass(frozen=True)
class StepTimings:
    """Measured device time of each part of a step (CUDA events on the GPU, wall time on CPU)."""

    prefill_s: tuple[float, ...] = ()  # per Prefill
    frame_s: float | None = None
    chunk_s: tuple[float, ...] = ()  # per ChunkBatch


@dataclass(frozen=True)
class StepResult:
    step_id: int
    eos: tuple[bool, ...] = ()  # per FrameRow: its codebook 0 was EOS
    timings: StepTimings = field(default_factory=StepTimings)


# -- outputs of postprocess, in the order the engine must act on them ----------------------------

@dataclass(frozen=True)
class AudioReady:
    """Send the PCM of `plan.chunks[batch].chunks[row]`, cut to its first `num_frames` frames."""

    stream_id: str
    batch: int
    row: int
    first_frame: int  # audible frame index (after a dropped frame 0)
    num_frames: int
    final: bool  # the stream's last audio


@dataclass(frozen=True)
class FlushDone:
    stream_id: str


@dataclass(frozen=True)
class Finished:
    stream_id: str
    reason: str  # eos | length


Output = AudioReady | FlushDone | Finished
