"""Scheduler: owns stream states, slots, admission and the cost model; decides every engine step.
No torch. The engine core only executes plans (nano-vllm's Scheduler / ModelRunner split).

    add / enqueue / flush / playout / audio_sent / abort      stream lifecycle (engine thread)
    schedule(now) -> StepPlan                                 what to launch next
    postprocess(StepResult) -> [Output]                       what a completed step means
    reap() -> [Output]                                        streams done without pending work
    violations(idle) -> [str]                                 invariants, checked while idle

Pipelining: on CUDA the engine launches step k+1 before it reads step k's codes, so `schedule`
plans a stream's next frame while its previous one may still be running (`frames_launched` runs
ahead of `frames_done`). A stream whose EOS arrives at frame k has had frame k+1 launched: that
row is discarded when its result comes. Its chunks may hold frames past the EOS too: their audio
is cut at the EOS frame (the codec is causal, so the cut equals decoding only the frames before).
A stream removed while work for it is in flight (cancel) frees its slot at once: the GPU runs
work in launch order, so a new stream's prefill in that slot comes after the old work, and the old
work's results are dropped by stream id.
"""

from __future__ import annotations

from collections import Counter

from .admission import Admission
from .config import SchedulerConfig
from .cost import CostModel
from .plan import (
    AudioReady,
    Chunk,
    ChunkBatch,
    Finished,
    FlushDone,
    FrameBatch,
    FrameRow,
    Output,
    Prefill,
    StepPlan,
    StepResult,
)
from .policy import deferrable, due_chunks, flushing, select_frame_rows, select_prefills, starving
from .request import FRAME_S, Phase, StreamState
from .slots import SlotPool

CAPACITY_EVERY = 16  # observed steps between refreshes of the admission's capacity estimate


class Scheduler:
    def __init__(self, config: SchedulerConfig, buckets: tuple[int, ...], eos_id: int, pad_id: int, *,
                 reject_predicted_underrun: bool = False, cost: CostModel | None = None):
        self.cfg = config.validate()
        self.buckets = tuple(sorted(b for b in buckets if b >= 1))
        if not self.buckets:
            raise ValueError("the scheduler needs at least one batch bucket")
        self.max_batch = self.buckets[-1]
        self.eos_id, self.pad_id = eos_id, pad_id
        self.slots = SlotPool(config.max_active_streams)
        self.cost = cost or CostModel(self.buckets, alpha=config.cost_ema_alpha)
        self.admission = Admission(config.max_active_streams, config.max_queued_streams, reject_predicted_underrun,
                                   config.first_audio_slo_s or 0.0)
        self.streams: dict[str, StreamState] = {}
        self.in_flight: dict[int, StepPlan] = {}  # launched, results not yet processed; launch order
        self._next_step = 0  # step ids
        self._main_steps = 0  # calls of schedule(), empty plans included (the codec tick counts these)
        self._tick_shift = 0  # codec tick steps postponed so far (SchedulerConfig.codec_tick_yields_to_prefill)
        self._tick_postponed = False  # the last tick step was postponed: the next one is not
        self._observed = 0
        self.stats: Counter[str] = Counter()
        self.publish_capacity()

    # -- stream lifecycle ----------------------------------------------------------------------------
    def add(self, state: StreamState) -> None:
        """A stream admitted by `admission` arrives at the engine thread."""
        if state.id in self.streams:
            raise ValueError(f"stream {state.id} exists")
        state.phase = Phase.WAITING_TEXT
        self.streams[state.id] = state
        self.admission.text_waits(+1)

    def enqueue(self, stream_id: str, prompt_len: int) -> None:
        """Its prompt is built (`prompt_len` rows): ready for a slot and a prefill."""
        s = self.streams[stream_id]
        if s.phase is not Phase.WAITING_TEXT:
            raise ValueError(f"stream {stream_id} is {s.phase.value}, not waiting for text")
        s.prompt_len = prompt_len
        s.phase = Phase.QUEUED
        self.admission.text_waits(-1)

    def flush(self, stream_id: str) -> None:
        """Frame k needs text token k + 2, so the text so far yields frames 0 .. n - 2: a flush
        completes when those exist and their audio is sent. (The last token's frames need more
        text, or end of input, which feeds tts_eos.)"""
        s = self.streams[stream_id]
        s.flush_targets.append(max(0, len(s.content_ids) - 1))

    def playout(self, stream_id: str, played_s: float, at: float) -> None:
        s = self.streams.get(stream_id)
        if s is not None:
            s.played_s, s.played_at = played_s, at

    def audio_sent(self, s: StreamState, seconds: float, now: float) -> None:
        """The engine sent `seconds` of the stream's audio (also after its Finished output)."""
        if s.first_audio_at is None:
            s.first_audio_at = now
            if s.slot_at is not None:
                self.admission.observe_first_audio(now - s.slot_at)
        s.audio_sent_s += seconds

    def abort(self, stream_id: str, cancelled: bool = True) -> StreamState | None:
        """Remove a stream in any state: its slot is free for the next plan, results of its work in
        flight are dropped. None for an unknown (or already removed) id."""
        s = self.streams.get(stream_id)
        if s is None:
            return None
        s.cancelled = s.cancelled or cancelled
        self._remove(s)
        return s

    def _remove(self, s: StreamState) -> None:
        if s.phase is Phase.WAITING_TEXT:
            self.admission.text_waits(-1)
        s.phase = Phase.FINISHED
        if s.slot is not None:
            self.slots.release(s.slot)
            s.slot = None
        del self.streams[s.id]
        self.admission.release()

    # -- planning ------------------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        step_id = self._next_step
        self._next_step += 1
        self._main_steps += 1
        decoding = [s for s in self.streams.values() if s.phase is Phase.DECODING]
        prefills = self._plan_prefills(decoding, now)
        decoding += [self.streams[p.stream_id] for p in prefills]
        frames = self._plan_frames(decoding, now)
        on_tick = self._on_tick(bool(prefills))
        chunks = self._plan_chunks(decoding, now, on_tick)
        plan = StepPlan(step_id, tuple(prefills), frames, chunks)
        if not plan.empty:
            self.in_flight[step_id] = plan
            self.stats["steps"] += 1
        return plan

    def wants_lookahead(self, now: float) -> bool:
        """Whether the engine may launch the next step before the one on the device is read
        (`SchedulerConfig.lookahead_buffer_s`): some stream waits for a slot or its first audio, is
        about to run dry, or capacity is short."""
        limit = self.cfg.lookahead_buffer_s
        decoding = 0
        for s in self.streams.values():
            if s.phase is Phase.QUEUED:
                return True
            if s.phase is Phase.DECODING:
                decoding += 1
                if not s.audible or (not s.launches_over and s.buffered_s(now) < limit):
                    return True
        return decoding > 0 and self.capacity_short(decoding, decoding)

    def capacity_short(self, candidates: int, decoding: int) -> bool:
        """More frame rows than the largest bucket, or a predicted cycle that misses real time."""
        if candidates > self.max_batch:
            return True
        return self.cycle_s(decoding) * self.cfg.realtime_margin > FRAME_S

    def cycle_s(self, decoding: int) -> float:
        return self.cost.cycle_s(decoding, arrivals_per_s=self.admission.arrivals_per_s(),
                                 codec_tick=self.cfg.codec_tick_steps or 0)

    def _plan_prefills(self, decoding: list[StreamState], now: float) -> list[Prefill]:
        queued = [s for s in self.streams.values() if s.phase is Phase.QUEUED]
        if not queued or not self.slots.num_free:
            return []
        audible = [s.buffered_s(now) for s in decoding if s.audible and not s.launches_over]
        step = self.cost.frame_step_s(self.cost.bucket_for(len(decoding) + 1))
        budget = min(audible) - step if audible else float("inf")
        chosen = select_prefills(queued, self.slots.num_free, self.cfg, budget_s=budget,
                                 cost_of=lambda s: self.cost.prefill_s(s.prompt_len))
        out = []
        for s in chosen:
            s.slot, s.slot_at = self.slots.allocate(), now
            s.phase = Phase.DECODING
            out.append(Prefill(s.id, s.slot, s.prompt_len))
        return out

    def _frame_ready(self, s: StreamState) -> bool:
        return (s.eos_frame is None and s.frames_launched < s.frame_limit
                and s.step_text(s.frames_launched, self.eos_id, self.pad_id) is not None)

    def _plan_frames(self, decoding: list[StreamState], now: float) -> FrameBatch | None:
        candidates = [s for s in decoding if self._frame_ready(s)]
        if not candidates:
            return None
        short = self.capacity_short(len(candidates), len(decoding))
        chosen = select_frame_rows(candidates, now, self.cfg, max_batch=self.max_batch,
                                   bucket_for=self.cost.bucket_for, short=short)
        picked = {s.id for s in chosen}
        for s in candidates:
            if s.id in picked:
                if starving(s, self.cfg):
                    self.stats["starved_runs"] += 1
                s.skipped_steps = 0
            elif deferrable(s, now, self.cfg):
                self.stats["yielded_rows"] += 1  # yielding by design: its buffer covers the wait
            else:
                s.skipped_steps += 1
        rows = []
        for s in chosen:
            frame = s.frames_launched
            rows.append(FrameRow(s.id, s.slot, frame, s.prompt_len + frame,
                                 s.step_text(frame, self.eos_id, self.pad_id)))
            s.frames_launched += 1
        return FrameBatch(tuple(rows), self.cost.bucket_for(len(rows)))

    def _on_tick(self, prefilling: bool) -> bool | None:
        """Whether this step is a codec tick step (None: no tick). With `codec_tick_yields_to_prefill`
        a tick that falls on a step with a prefill moves to the next step (not twice in a row): the
        new stream's next frame waits for this step's talker half, which the tick's calls would
        precede, while in the next step its first chunk goes ahead of them."""
        tick = self.cfg.codec_tick_steps or 0
        if not tick:
            return None
        on_tick = (self._main_steps - self._tick_shift) % tick == 0
        if on_tick and prefilling and self.cfg.codec_tick_yields_to_prefill and not self._tick_postponed:
            self._tick_shift += 1
            self._tick_postponed = True
            self.stats["ticks_postponed"] += 1
            return False
        if on_tick:
            self._tick_postponed = False
        return on_tick

    def _plan_chunks(self, decoding: list[StreamState], now: float, on_tick: bool | None) -> tuple[ChunkBatch, ...]:
        short = self.capacity_short(0, len(decoding))
        per_stream: list[list[Chunk]] = []
        last: set[tuple[str, int]] = set()  # (stream, first frame) of each stream's final chunk
        for s in sorted(decoding, key=lambda s: s.arrival):
            due = due_chunks(s, on_tick, urgent=s.audible and s.buffered_s(now) < self.cfg.codec_tick_urgent_s,
                             free_chunks=self.cfg.codec_tick_free_chunks)
            if not due:
                continue
            if short and deferrable(s, now, self.cfg) and not (s.launches_over or flushing(s)):
                self.stats["deferred_chunks"] += len(due)
                continue
            per_stream.append([Chunk(s.id, s.slot, first, n) for first, n in due])
            s.frames_chunked += sum(n for _, n in due)
            s.chunks_planned += len(due)
            if s.launches_over and s.audible_frames_ready() == 0:
                last.add((s.id, due[-1][0]))
        # Round r holds each stream's r-th due chunk; within a round, equal lengths share a codec call.
        batches: list[ChunkBatch] = []
        for r in range(max((len(c) for c in per_stream), default=0)):
            by_length: dict[int, list[Chunk]] = {}
            for chunks in per_stream:
                if r < len(chunks):
                    by_length.setdefault(chunks[r].num_frames, []).append(chunks[r])
            self._pad_last_chunks(by_length, last)
            batches += [ChunkBatch(n, tuple(cs)) for n, cs in by_length.items()]
        return tuple(batches)

    def _pad_last_chunks(self, by_length: dict[int, list[Chunk]], last: set[tuple[str, int]]) -> None:
        """A stream's final chunk may ride in a longer call of the same round, padded: its audio is
        cut to its own frames and its codec state, past its end, is never read again. Done when the
        cost model says one longer call costs less than two (each call has a fixed cost)."""
        for n in sorted(by_length):
            group = by_length[n]
            if not all((c.stream_id, c.first_frame) in last for c in group):
                continue
            longer = [m for m in sorted(by_length) if m > n]
            if not longer:
                continue
            m = longer[0]
            host = by_length[m]
            apart = self.cost.chunk_s(m, len(host)) + self.cost.chunk_s(n, len(group))
            if self.cost.chunk_s(m, len(host) + len(group)) < apart:
                host += group
                del by_length[n]
                self.stats["padded_chunks"] += len(group)

    # -- results -------------------------------------------------------------------------------------
    def postprocess(self, result: StepResult) -> list[Output]:
        """Apply a completed step (steps complete in launch order)."""
        plan = self.in_flight.get(result.step_id)
        oldest = next(iter(self.in_flight), None)
        if plan is None:
            raise RuntimeError(f"step {result.step_id} completed but is not in flight")
        if result.step_id != oldest:
            raise RuntimeError(f"step {result.step_id} completed before step {oldest}")
        del self.in_flight[result.step_id]
        self._observe(plan, result)
        touched: dict[str, None] = {}
        if plan.frames is not None:
            if len(result.eos) != len(plan.frames.rows):
                raise RuntimeError(f"step {plan.step_id}: {len(result.eos)} EOS flags for "
                                   f"{len(plan.frames.rows)} frame rows")
            for row, eos in zip(plan.frames.rows, result.eos):
                if self._apply_frame(row, eos):
                    touched[row.stream_id] = None
        outputs: list[Output] = []
        for b, batch in enumerate(plan.chunks):
            for r, chunk in enumerate(batch.chunks):
                out = self._apply_chunk(chunk, b, r)
                if out is not None:
                    outputs.append(out)
                    touched[chunk.stream_id] = None
        outputs += self._settle([self.streams[sid] for sid in touched if sid in self.streams])
        return outputs

    def _observe(self, plan: StepPlan, result: StepResult) -> None:
        t = result.timings
        for p, seconds in zip(plan.prefills, t.prefill_s):
            self.cost.observe_prefill(p.prompt_len, seconds)
        if plan.frames is not None and t.frame_s is not None:
            self.cost.observe_frame_step(plan.frames.bucket, t.frame_s)
        for batch, seconds in zip(plan.chunks, t.chunk_s):
            self.cost.observe_chunk(batch.num_frames, len(batch.chunks), seconds)
        # Capacity evaluates the cycle for every stream count (~0.8 ms of Python here): refresh
        # it on the first observation and every CAPACITY_EVERY-th, not on every step.
        self._observed += 1
        if self._observed % CAPACITY_EVERY == 1:
            self.publish_capacity()

    def publish_capacity(self) -> None:
        self.admission.publish_capacity(self.cost.sustainable_streams(
            self.cfg.max_active_streams, self.cfg.realtime_margin,
            arrivals_per_s=self.admission.arrivals_per_s(), codec_tick=self.cfg.codec_tick_steps or 0))

    def _apply_frame(self, row: FrameRow, eos: bool) -> bool:
        s = self.streams.get(row.stream_id)
        if s is None or (s.eos_frame is not None and row.frame > s.eos_frame):
            self.stats["frames_wasted"] += 1  # removed meanwhile, or launched past its EOS
            return False
        if row.frame != s.frames_done:
            raise RuntimeError(f"stream {s.id}: frame {row.frame} completed, expected {s.frames_done}")
        if eos:
            s.eos_frame = row.frame
            s.finish_reason = "eos"
            return True
        s.frames_done += 1
        self.stats["frames"] += 1
        if s.frames_done >= s.frame_limit:
            s.finish_reason = s.finish_reason or _limit_reason(s)
        return True

    def _apply_chunk(self, chunk: Chunk, batch: int, row: int) -> AudioReady | None:
        s = self.streams.get(chunk.stream_id)
        if s is None:
            self.stats["chunks_discarded"] += 1
            return None
        # Every frame of the chunk was launched by this step, so its EOS check is done by now.
        valid = chunk.num_frames
        if s.eos_frame is not None:
            valid = max(0, min(valid, s.eos_frame - chunk.first_frame))
        if valid == 0:
            self.stats["chunks_discarded"] += 1
            return None
        first = chunk.first_frame - s.audible_skip
        if first != s.frames_decoded:
            raise RuntimeError(f"stream {s.id}: chunk from audible frame {first}, expected {s.frames_decoded}")
        s.frames_decoded += valid
        s.chunks_emitted += 1
        final = s.end_certain and s.frames_decoded + s.audible_skip >= s.end_frame
        return AudioReady(s.id, batch, row, first, valid, final)

    def _complete(self, s: StreamState) -> bool:
        return s.end_certain and s.frames_decoded + s.audible_skip >= s.end_frame

    def _settle(self, streams: list[StreamState]) -> list[Output]:
        """Flushes whose audio is out, then streams whose last audio is out."""
        outputs: list[Output] = []
        for s in streams:
            if s.phase is not Phase.DECODING:
                continue
            complete = self._complete(s)
            while s.flush_targets and (complete or s.frames_decoded + s.audible_skip >= s.flush_targets[0]):
                s.flush_targets.popleft()
                outputs.append(FlushDone(s.id))
            if complete:
                s.finish_reason = s.finish_reason or _limit_reason(s)
                outputs.append(Finished(s.id, s.finish_reason))
                self.stats["finished"] += 1
                self._remove(s)
        return outputs

    def reap(self) -> list[Output]:
        """Flushes and finishes that need no result (e.g. a flush with no new text, or a length
        limit that input end lowered below the frames already made)."""
        return self._settle(list(self.streams.values()))

    # -- health --------------------------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.streams) or bool(self.in_flight)

    def violations(self, idle: bool) -> list[str]:
        """Invariants; `idle`: nothing in flight, so every launched frame has been read."""
        out = self.slots.violations()
        held = {}
        for s in self.streams.values():
            if s.phase is Phase.FINISHED:
                out.append(f"finished stream {s.id} is still live")
            if (s.phase is Phase.DECODING) != (s.slot is not None):
                out.append(f"stream {s.id} is {s.phase.value} with slot {s.slot}")
            if s.slot is not None:
                if s.slot in held:
                    out.append(f"slot {s.slot} held by {held[s.slot]} and {s.id}")
                held[s.slot] = s.id
            if not (s.frames_decoded <= s.frames_chunked and s.frames_done <= s.frames_launched
                    and s.frames_decoded <= max(0, s.frames_done - s.audible_skip)):
                out.append(f"stream {s.id} frame counters out of order: launched {s.frames_launched}, done "
                           f"{s.frames_done}, chunked {s.frames_chunked}, decoded {s.frames_decoded}")
            if idle and s.eos_frame is None and s.frames_launched != s.frames_done:
                out.append(f"stream {s.id}: {s.frames_launched - s.frames_done} frames launched and never read")
        if set(held) != self.slots.used:
            out.append(f"slots in use {sorted(self.slots.used)} != slots of live streams {sorted(held)}")
        waiting = sum(1 for s in self.streams.values() if s.phase is Phase.WAITING_TEXT)
        if waiting != self.admission.waiting_text:
            out.append(f"admission counts {self.admission.waiting_text} streams waiting for text, not {waiting}")
        if idle and self.in_flight:
            out.append(f"idle with steps in flight: {sorted(self.in_flight)}")
        return out

    def metrics(self) -> dict[str, float]:
        """Safe from any thread: it reads copies (list() and dict() of builtins run under the GIL)."""
        phases = Counter(s.phase for s in list(self.streams.values()))
        decoding = phases[Phase.DECODING]
        return {
            "waiting_text_streams": phases[Phase.WAITING_TEXT],
            "prefill_queue": phases[Phase.QUEUED],
            "steps_in_flight": len(self.in_flight),
            "predicted_cycle_ms": self.cycle_s(decoding) * 1e3,
            "sustainable_streams": self.admission.sustainable,
            "slot_to_first_audio_ms": self.admission.slot_to_audio_s * 1e3,
            "slot_to_first_audio_high_ms": self.admission.slot_to_audio_high_s() * 1e3,
            "cost_frame_step_ms": self.cost.frame_step_s(self.cost.bucket_for(max(1, decoding))) * 1e3,
            **{f"scheduler_{k}": float(v) for k, v in dict(self.stats).items()},
        }


def _limit_reason(s: StreamState) -> str:
    """A random-weight stream reaching its forced length is where a real one would emit EOS."""
    return "eos" if s.forced_frames is not None and s.frames_done >= s.forced_frames else "length"
