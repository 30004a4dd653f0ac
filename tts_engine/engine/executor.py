"""StepExecutor: runs one scheduler `StepPlan` on the runners without waiting for the device.

Launch order (the default CUDA stream runs them in this order):
  prefills    ModelRunner.prefill, then the sampling row and the codec state reset, per stream. With
              the runner's prefill stream the prompt's embedding and the prefill go there instead,
              after the slot's previous work (`SlotFences`), and the default stream waits for them
              before the frame step: a new stream's prefill runs beside the steps in flight
  codes half  ModelRunner.frame_step_async -> StepCodes: codes [B, 16] on the device (with CUDA
              graphs a view of the graph's static output, which the next replay overwrites: it
              is copied into `FrameCodes` at once, stream-ordered, so before any later replay) and
              their pinned host copy, which the runner queues right after the code predictor;
              codebook 0 of the host copy is the EOS check, the device rows stay for the codec.
  chunks      [B, 16, t] codes gathered from `FrameCodes` -> CodecRunner.decode -> int16 PCM, copied
              to pinned host memory. Queued from the runner's `after_codes` hook, between the frame
              step's two halves: no chunk needs the talker half.
  talker half the rest of the frame step (without a frame step, the chunks alone)
  event       one after the step; `LaunchedStep.wait()` blocks on it when the step is read
On CPU every call is synchronous, the copies are no-ops and the step is complete when launched.

Timings come from CUDA events around each part (device time, read after the step completed), or
wall time on CPU, and feed the scheduler's cost model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..runtime.codec_runner import CodecRunner
from ..runtime.frame_codes import FrameCodes
from ..runtime.runner import ModelRunner
from ..scheduler.plan import StepPlan, StepResult, StepTimings
from ..voices.rows import embed_clone_prompt
from .entry import StreamEntry


class _Timer:
    """Per-part device time: CUDA events (no sync when recorded) or perf_counter on CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.parts: list[tuple[str, object, object]] = []

    def start(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, kind: str, started) -> None:
        self.parts.append((kind, started, self.start()))

    def seconds(self, kind: str) -> list[float]:
        if self.cuda:
            return [a.elapsed_time(b) / 1e3 for k, a, b in self.parts if k == kind]
        return [b - a for k, a, b in self.parts if k == kind]


class SlotFences:
    """Per slot, the end of the latest step that touched it (prefill, frame rows or chunks). A prefill
    on the prefill stream waits for it first: a slot freed while its stream's steps are in flight can
    go to a new stream at once, whose prefill there would otherwise race them (on one stream, order
    does it). Fired events cost nothing to wait for."""

    def __init__(self):
        self._last: dict[int, object] = {}

    def record(self, plan: StepPlan, event: object) -> None:
        """event: the step's end."""
        for slot in plan_slots(plan):
            self._last[slot] = event

    def take(self, slot: int) -> object | None:
        """The event that new work for `slot` on another stream must wait for, then forgotten: the new
        work, and whatever follows it there, comes after it."""
        return self._last.pop(slot, None)


def plan_slots(plan: StepPlan) -> set[int]:
    slots = {p.slot for p in plan.prefills} | {c.slot for b in plan.chunks for c in b.chunks}
    if plan.frames is not None:
        slots |= {r.slot for r in plan.frames.rows}
    return slots


@dataclass
class LaunchedStep:
    plan: StepPlan
    timer: _Timer
    c0: torch.Tensor | None = None  # [B] codebook-0 ids on the host (a view of pinned memory on CUDA)
    pcm: list[torch.Tensor | None] = field(default_factory=list)  # per ChunkBatch: [n, t * 1920] int16, host
    event: torch.cuda.Event | None = None  # end of the step on the default stream
    begin: torch.cuda.Event | None = None  # its start there: device_s
    # Chunk batches holding a stream's first chunk, launched before the others: their PCM (and c0)
    # is on the host once early_event has fired, before the rest of the step (engine: first audio).
    early_batches: tuple[int, ...] = ()
    early_event: torch.cuda.Event | None = None
    early_sent: set[tuple[int, int]] = field(default_factory=set)  # (batch, row) already delivered
    early_delivered: bool = False  # its early first audio has been looked at (engine._deliver_early)
    _host_pcm: dict[int, np.ndarray] = field(default_factory=dict)

    def host_pcm(self, batch: int) -> np.ndarray:
        """Once the chunk batch's PCM is on the host (after `wait` or `wait_early`): its rows [n, samples]
        as int16 samples (the codec call made them: `CodecRunner.decode(s16=True)`), one array for all its
        streams."""
        pcm = self._host_pcm.get(batch)
        if pcm is None:
            pcm = self._host_pcm[batch] = self.pcm[batch].numpy()
        return pcm

    def early_ready(self) -> bool:
        """Never blocks: is the early first audio on the host (True when there is none, and on CPU)?"""
        return self.early_event is None or self.early_event.query()

    def ready(self) -> bool:
        """Never blocks: has the device finished the whole step (always, on CPU)?"""
        return self.event is None or self.event.query()

    def wait_early(self) -> None:
        if self.early_event is not None:
            self.early_event.synchronize()

    def wait(self) -> None:
        if self.event is not None:
            self.event.synchronize()

    def device_s(self) -> float | None:
        """After wait(), on CUDA: the default stream's time from the step's start to its end. Steps run
        one after another there, so their sum over a window estimates the device's busy time in it, with
        any time inside a step in which the device waited for the host to queue the step's next work.
        An estimate: event times on a stream that also waits on another (the prefill stream) can run a
        few % over (CUDA's event timing is not exact across streams)."""
        if self.begin is None or self.event is None:
            return None
        return self.begin.elapsed_time(self.event) / 1e3

    def result(self, eos_id: int | None) -> StepResult:
        """Call after wait(). eos_id None: EOS never ends a stream (random weights)."""
        eos = () if self.c0 is None else tuple(eos_id is not None and int(c) == eos_id for c in self.c0.tolist())
        frame = self.timer.seconds("frame")  # its two halves, around the chunks
        return StepResult(self.plan.step_id, eos, StepTimings(tuple(self.timer.seconds("prefill")),
                                                              sum(frame) if frame else None,
                                                              tuple(self.timer.seconds(f"chunk{i}")[0]
                                                                    for i in range(len(self.plan.chunks)))))


def _mark(entries: dict[str, StreamEntry], stream_ids, mark: str, now: float) -> None:
    """A first-audio trace mark (entry.FirstAudioTrace) of each stream, set the first time only."""
    for sid in stream_ids:
        trace = entries[sid].trace
        if trace is not None and getattr(trace, mark) is None:
            setattr(trace, mark, now)


def _mark_launched(plan: StepPlan, entries: dict[str, StreamEntry], now: float) -> None:
    """First-audio trace marks: the launch of a stream's prefill and of its first chunk."""
    _mark(entries, (p.stream_id for p in plan.prefills), "prefill_launched", now)
    _mark(entries, (c.stream_id for batch in plan.chunks for c in batch.chunks), "chunk_launched", now)


def _mark_issued(entries: dict[str, StreamEntry], stream_id: str) -> None:
    """First-audio trace mark: the stream's prefill is on the device's queue."""
    _mark(entries, (stream_id,), "prefill_issued", time.monotonic())


class StepExecutor:
    def __init__(self, runner: ModelRunner, codec_runner: CodecRunner, *, eos_allowed: bool):
        self.runner, self.codec_runner = runner, codec_runner
        self.cuda = runner.device.type == "cuda"
        self.eos_allowed = eos_allowed
        self.max_code = codec_runner.codec.cfg.codebook_size - 1
        self.codes = FrameCodes(runner.max_slots, runner.max_context, codec_runner.codec.cfg.num_quantizers,
                                runner.device)
        # With the prefill stream, work on two CUDA streams: a prefill there waits for its slot's last step.
        self.fences = SlotFences() if runner.prefill_stream is not None else None

    @torch.inference_mode()
    def launch(self, plan: StepPlan, entries: dict[str, StreamEntry]) -> LaunchedStep:
        _mark(entries, (p.stream_id for p in plan.prefills), "launch_began", time.monotonic())
        step = LaunchedStep(plan, _Timer(self.cuda))
        if self.cuda:
            step.begin = torch.cuda.Event(enable_timing=True)
            step.begin.record()
        self._prefills(plan, entries, step)
        # Chunks after the codes half of the frame step (they may hold its frames) and before its
        # talker half, which no chunk needs: first audio comes a talker step sooner.
        if plan.frames is not None:
            step.c0 = self._frame_step(plan, entries, step)
        else:
            self._launch_chunks(plan, entries, step)
        if self.cuda:
            step.event = torch.cuda.Event(enable_timing=True)
            step.event.record()
            if self.fences is not None:
                self.fences.record(plan, step.event)
        _mark_launched(plan, entries, time.monotonic())
        return step

    def _prefills(self, plan: StepPlan, entries: dict[str, StreamEntry], step: LaunchedStep) -> None:
        side = self.runner.prefill_stream
        if side is None:
            for p in plan.prefills:  # each prefill first: on an idle GPU it starts while the host queues the rest
                entry = entries[p.stream_id]
                t0 = step.timer.start()
                self._fill(p.slot, entry)
                _mark_issued(entries, p.stream_id)
                self._start_slot(p.slot, entry)
                step.timer.stop("prefill", t0)
            return
        if not plan.prefills:
            return
        with torch.cuda.stream(side):  # the prompts' embedding too: on the default stream it would queue
            for p in plan.prefills:
                event = self.fences.take(p.slot)
                if event is not None:
                    side.wait_event(event)
                t0 = step.timer.start()
                self._fill(p.slot, entries[p.stream_id])
                step.timer.stop("prefill", t0)
                _mark_issued(entries, p.stream_id)
            done = torch.cuda.Event()
            done.record()
        torch.cuda.current_stream().wait_event(done)  # before this step's frame rows read the slots
        for p in plan.prefills:
            self._start_slot(p.slot, entries[p.stream_id])

    def _launch_chunks(self, plan: StepPlan, entries: dict[str, StreamEntry], step: LaunchedStep) -> None:
        calls = []
        for index, batch in enumerate(plan.chunks):
            chunks = batch.chunks
            # [B, 16, t] on the default stream, after the steps that wrote them; a final chunk shorter than the
            # call is padded with copies of its last frame.
            codes = self.codes.take([c.slot for c in chunks], [c.first_frame for c in chunks],
                                    [c.num_frames for c in chunks], batch.num_frames)
            # A chunk planned before its EOS check may hold the EOS frame (codebook-0 id past the
            # codec's range); its audio is cut there, so only the ids need to be valid.
            codes[:, 0].clamp_(max=self.max_code)
            first = any(c.first_frame == entries[c.stream_id].state.audible_skip for c in batch.chunks)
            calls.append((not first, index, [c.slot for c in batch.chunks], codes))
        if not calls:
            return
        # Batches with a stream's first chunk go first (stable otherwise). Safe: a first chunk is its
        # stream's round 0, and moving a round-0 call earlier keeps every stream's chunks in order.
        calls.sort(key=lambda call: call[0])
        step.early_batches = tuple(index for later, index, _, _ in calls if not later)
        step.pcm = [None] * len(plan.chunks)
        for later, index, slots, codes in calls:
            if later and step.early_batches and step.early_event is None and self.cuda:
                step.early_event = torch.cuda.Event()
                step.early_event.record()
            t0 = step.timer.start()
            pcm = self.codec_runner.decode(slots, codes, s16=True)
            step.timer.stop(f"chunk{index}", t0)
            step.pcm[index] = pcm.to("cpu", non_blocking=True)
        if step.early_batches and step.early_event is None and self.cuda:
            step.early_event = torch.cuda.Event()
            step.early_event.record()

    def _fill(self, slot: int, entry: StreamEntry) -> None:
        """The prompt's embedding and prefill for `slot`, on the current stream."""
        prompt = entry.prompt
        if prompt.clone is not None:  # a cloned voice's vector rows: embedded and prefilled eagerly
            self.runner.prefill(slot, embed_clone_prompt(self.runner, prompt))
            return
        self.runner.prefill_prompt(slot, list(prompt.text_ids), list(prompt.codec_ids))

    def _start_slot(self, slot: int, entry: StreamEntry) -> None:
        self.runner.start_slot(slot, entry.options.params, entry.state.seed, eos_allowed=self.eos_allowed)
        # A new stream decodes from scratch (2 zeroing kernels), an in-context cloned voice's after its reference codes.
        clone = entry.prompt.clone
        self.codec_runner.start(slot, clone.ref_codes if clone is not None else None)

    def _frame_step(self, plan: StepPlan, entries: dict[str, StreamEntry], step: LaunchedStep) -> torch.Tensor:
        rows, timer = plan.frames.rows, step.timer
        t0 = timer.start()
        t1 = None

        def after_codes(codes: torch.Tensor) -> None:
            nonlocal t1
            timer.stop("frame", t0)  # the codes half; the talker half is timed after the chunks
            self.codes.keep([r.slot for r in rows], [r.frame for r in rows], codes)
            self._launch_chunks(plan, entries, step)
            t1 = timer.start()

        step_codes = self.runner.frame_step_async([r.slot for r in rows], [r.frame for r in rows],
                                                  [r.position for r in rows], [r.text_id for r in rows],
                                                  after_codes=after_codes)
        timer.stop("frame", t1)
        # Pinned host copy made by the runner right after the code predictor; read after the step's
        # event (recorded later on the same stream), well within the runner's ring of STEP_RING steps.
        return step_codes.host_buffer[:, 0]
