"""The real scheduler under open-loop load on a simulated device: what the policy does at 10-60 req/s
without a GPU.

    python -m bench.schedsim --rates 10,20,30,40 --duration 60

The device is a cost table measured on the H200 (docs/benchmarks.md, runs 5 and 7): a frame step by
batch bucket, a codec call by (frames, batch), a prefill. The loop is `StreamingEngine._step` at
depth 2 (one step at a time while no stream needs lookahead, `Scheduler.wants_lookahead`):
a step starts on the device when it is launched and the previous one has ended, and its results
(EOS, audio) are read when it has ended and the next one is launched; a stream's first chunk is
sent when its own codec call has ended (the engine's early first audio). Planning costs `--plan-ms` of
host time per step. Requests are the benchmark's (Harvard sentences, 1-3 joined, Poisson arrivals),
their length in frames as a random-weight checkpoint forces it; each listener plays from its first
audio with no buffer, as `cadence bench` does, and every late chunk is an underrun.

Only the schedule is simulated (no tensors): it shows where the policy leaves a stream without audio
and what the cost table says each step costs, and it is not a measurement of the engine.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import deque
from dataclasses import dataclass, field

from tts_engine.checkpoint import DEFAULT_CHARS_PER_SECOND, speech_frames
from tts_engine.engine.api import DEFAULT_CHUNK_SCHEDULE
from tts_engine.engine.pipeline import StepPipeline
from tts_engine.prompt import Layout
from tts_engine.scheduler.config import CODEC_TICK_CUDA, SchedulerConfig
from tts_engine.scheduler.plan import AudioReady, StepPlan, StepResult, StepTimings
from tts_engine.scheduler.request import FRAME_S, StreamState
from tts_engine.scheduler.scheduler import Scheduler

from .load.corpus import prompt_for

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
EOS, PAD = 151673, 151671
# H200, 1.7B, ms (run 5, commit 30cb3a1): frame step per bucket (its codes half ~3.4, then the
# chunks, then the talker half); prefill of a ~40-row prompt. Codec call (TF32 with the fused
# SnakeBeta, run 7, f481c28) per batch at 1 and 12 frames, linear in frames between.
FRAME_MS = {1: 5.17, 2: 5.0, 4: 4.9, 8: 4.74, 16: 4.9, 32: 5.07, 64: 5.39}
CODES_HALF_MS = 3.4
CODE_PREDICTOR_MS = 3.45  # its part of FRAME_MS[1] and of CODES_HALF_MS (run 7)
CODEC_MS = {1: (2.31, 3.25), 8: (3.21, 7.73), 32: (4.94, 24.53)}
PREFILL_MS = 2.07
# `--costs run10`: the frame step per bucket at run 10's defaults (aeb3225's stages with attention v3,
# the talker's GEMVs and PDL at batch 1; buckets 2 and 4 interpolated, not measured) and its codes
# half (the frame step less the talker step); prefill of a 40-row prompt 2.11 ms.
RUN10_FRAME_MS = {1: 3.30, 2: 3.7, 4: 4.6, 8: 4.70, 16: 4.83, 32: 5.01, 64: 5.29}
RUN10_CODES_HALF_MS = {1: 1.87, 2: 2.1, 4: 3.0, 8: 3.12, 16: 3.19, 32: 3.30, 64: 3.52}
RUN10_PREFILL_MS = 2.11
# `--costs run11`: run 10's frame steps and the codec's bf16 fast path (run 11, 6f462e3), per batch at 1
# and 12 frames.
RUN11_CODEC_MS = {1: (1.61, 2.07), 8: (2.04, 5.66), 32: (3.48, 17.83)}


def codec_ms(frames: int, batch: int, table: dict[int, tuple[float, float]] = CODEC_MS) -> float:
    """Cost of one codec call, interpolated in frames and (log) batch from `table` (CODEC_MS)."""
    def at(b: int) -> float:
        one, twelve = table[b]
        return one + (twelve - one) * (frames - 1) / 11
    pieces = math.ceil(batch / 32)  # the runner splits batches above its largest bucket
    b = min(batch, 32)
    if b <= 1:
        per = at(1)
    elif b <= 8:
        w = math.log2(b) / 3
        per = at(1) + (at(8) - at(1)) * w
    else:
        w = (math.log2(b) - 3) / 2
        per = at(8) + (at(32) - at(8)) * w
    return per * pieces


@dataclass
class Listener:
    opened: float
    first_audio: float | None = None
    received_s: float = 0.0
    underruns: int = 0
    stall_s: float = 0.0


@dataclass
class _Step:
    plan: StepPlan
    end: float
    result: StepResult
    early_end: float  # its first chunks' PCM is ready (the engine sends it before the step ends)

    def wait(self) -> None:
        pass


@dataclass
class Sim:
    rate: float
    duration_s: float
    seed: int = 0
    plan_ms: float = 1.0
    plan_ms_per_row: float = 0.0  # host time that grows with the step's frame rows
    # What-if: the code predictor this much faster than in the cost table (its 3.45 ms at batch 1 is
    # in every frame step and in the codes half that precedes a chunk).
    code_predictor_cut_ms: float = 0.0
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    schedule: tuple[int, ...] = DEFAULT_CHUNK_SCHEDULE
    early_audio: bool = True  # the engine's early first audio (commits before c460b4c had none)
    run10_costs: bool = False  # the frame step and its codes half by bucket as run 10 measured them
    codec_scale: float = 1.0  # what-if: every codec call this fraction of the cost table's
    codec_table: dict[int, tuple[float, float]] = field(default_factory=lambda: CODEC_MS)

    def run(self) -> dict:
        rng = random.Random(self.seed)
        sched = Scheduler(self.config, BUCKETS, EOS, PAD, reject_predicted_underrun=True)
        pipeline = StepPipeline(2)
        arrivals: deque[tuple[float, int]] = deque()
        t, i = 0.0, 0
        while t < self.duration_s:
            t += rng.expovariate(self.rate)
            arrivals.append((t, i))
            i += 1
        now, device_free = 0.0, 0.0
        listeners: dict[str, Listener] = {}
        states: dict[str, StreamState] = {}
        rejected = 0
        busy_s = 0.0
        steps = 0
        frames_per_step = []
        while arrivals or sched.has_work() or len(pipeline):
            while arrivals and arrivals[0][0] <= now:
                at, k = arrivals.popleft()
                with sched.admission.lock:
                    decision = sched.admission.try_admit(at)
                if not decision.admitted:
                    rejected += 1
                    continue
                text = prompt_for(self.seed, k).text
                frames = speech_frames(text, DEFAULT_CHARS_PER_SECOND)
                s = StreamState(f"s{k}", Layout.NON_STREAMING, seed=k, max_frames=2048, forced_frames=frames,
                                chunk_schedule=self.schedule, drop_first_frame=True, arrival=now)
                sched.add(s)
                s.content_ids.extend(range(len(text) // 4 + 1))
                s.input_ended = True
                sched.enqueue(s.id, 20 + len(s.content_ids))
                listeners[s.id] = Listener(at)
                states[s.id] = s
            for out in sched.reap():
                self._deliver(out, listeners, states, sched, now)
            plan = sched.schedule(now)
            now += (self.plan_ms + self.plan_ms_per_row * (len(plan.frames.rows) if plan.frames else 0)) / 1e3
            if not plan.empty:
                cost = self._cost(plan)
                start = max(now, device_free)
                device_free = start + cost
                busy_s += cost
                steps += 1
                if plan.frames is not None:
                    frames_per_step.append(len(plan.frames.rows))
                timings = StepTimings(tuple(self._prefill_ms() / 1e3 for _ in plan.prefills),
                                      self._frame_ms(plan.frames.bucket) / 1e3 if plan.frames else None,
                                      tuple(self._codec_ms(b) / 1e3 for b in plan.chunks))
                eos = tuple(False for _ in plan.frames.rows) if plan.frames else ()
                first = [b for b in plan.chunks if any(c.first_frame == 1 for c in b.chunks)]
                codes_half = self._codes_half_ms(plan.frames.bucket) if plan.frames else 0
                early_end = (start + (self._prefill_ms() * len(plan.prefills) + codes_half
                                      + sum(self._codec_ms(b) for b in first)) / 1e3)
                pipeline.push(_Step(plan, device_free, StepResult(plan.step_id, eos, timings), early_end))
            depth = None if sched.wants_lookahead(now) else 1  # as the engine: lookahead only when needed
            for step in pipeline.completed(must_wait=plan.empty, depth=depth):
                # the engine's _deliver_early: first chunks go out when their own codec call ends
                early = {c.stream_id: max(now, step.early_end) for b in step.plan.chunks for c in b.chunks
                         if c.first_frame == 1 and self.early_audio}
                now = max(now, step.end)
                for out in sched.postprocess(step.result):
                    at = early.pop(out.stream_id, now) if isinstance(out, AudioReady) else now
                    self._deliver(out, listeners, states, sched, at)
            if plan.empty and not len(pipeline) and arrivals and not sched.has_work():
                now = max(now, arrivals[0][0])
        return self._summary(listeners, rejected, busy_s, now, steps, frames_per_step)

    def _frame_ms(self, bucket: int) -> float:
        return (RUN10_FRAME_MS if self.run10_costs else FRAME_MS)[bucket] - self.code_predictor_cut_ms

    def _codes_half_ms(self, bucket: int) -> float:
        return (RUN10_CODES_HALF_MS[bucket] if self.run10_costs else CODES_HALF_MS) - self.code_predictor_cut_ms

    def _codec_ms(self, batch) -> float:
        return codec_ms(batch.num_frames, len(batch.chunks), self.codec_table) * self.codec_scale

    def _prefill_ms(self) -> float:
        return RUN10_PREFILL_MS if self.run10_costs else PREFILL_MS

    def _cost(self, plan: StepPlan) -> float:
        ms = self._prefill_ms() * len(plan.prefills)
        if plan.frames is not None:
            ms += self._frame_ms(plan.frames.bucket)
        ms += sum(self._codec_ms(b) for b in plan.chunks)
        return ms / 1e3

    @staticmethod
    def _deliver(out, listeners, states, sched, now: float) -> None:
        lis = listeners[out.stream_id]
        if isinstance(out, AudioReady):
            if lis.first_audio is None:
                lis.first_audio = now
            else:
                # zero-buffer playout from first audio: runs dry at first_audio + received + stalls
                dry_at = lis.first_audio + lis.received_s + lis.stall_s
                if now > dry_at + 1e-9:
                    lis.underruns += 1
                    lis.stall_s += now - dry_at
            lis.received_s += out.num_frames * FRAME_S
            sched.audio_sent(states[out.stream_id], out.num_frames * FRAME_S, now)

    def _summary(self, listeners, rejected, busy_s, end, steps, frames_per_step) -> dict:
        served = [x for x in listeners.values() if x.first_audio is not None]
        ttfa = sorted((x.first_audio - x.opened) * 1e3 for x in served)

        def pct(p: float) -> float:
            return ttfa[max(0, math.ceil(p / 100 * len(ttfa)) - 1)] if ttfa else math.inf

        return {"rate": self.rate, "requests": len(listeners) + rejected, "rejected": rejected,
                "ttfa_ms_p50": pct(50), "ttfa_ms_p95": pct(95), "ttfa_ms_p99": pct(99),
                "underrun_requests": sum(1 for x in served if x.underruns),
                "stall_ms_total": sum(x.stall_s for x in served) * 1e3,
                "device_busy": busy_s / end if end else 0.0, "steps": steps,
                "frames_per_step": sum(frames_per_step) / max(1, len(frames_per_step))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.schedsim", description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="10,20,30,40")
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plan-ms", type=float, default=1.0, help="host time to plan and launch one step")
    p.add_argument("--plan-ms-per-row", type=float, default=0.0,
                   help="more host time per frame row of the step (run 8's engine counters: plan, launch and "
                        "read came to ~1.2 ms + 0.08 ms a row)")
    p.add_argument("--code-predictor-ms", type=float, default=CODE_PREDICTOR_MS,
                   help=f"what-if: the code predictor's frame at batch 1 (the cost table's {CODE_PREDICTOR_MS} ms; "
                        "issue 3's target is 1.2), the difference taken off every frame step")
    p.add_argument("--schedule", default=",".join(map(str, DEFAULT_CHUNK_SCHEDULE)), help="chunk schedule")
    p.add_argument("--codec-tick", type=int, default=CODEC_TICK_CUDA, help="SchedulerConfig.codec_tick_steps (0: off)")
    p.add_argument("--tick-urgent-s", type=float, default=SchedulerConfig.codec_tick_urgent_s)
    p.add_argument("--tick-yields-to-prefill", action=argparse.BooleanOptionalAction,
                   default=SchedulerConfig.codec_tick_yields_to_prefill,
                   help="SchedulerConfig.codec_tick_yields_to_prefill (a tick step with a prefill moves on a step; "
                        "on by default, as in the engine)")
    p.add_argument("--no-early-audio", action="store_true",
                   help="first audio at the end of its step, as the engine did before early first audio")
    p.add_argument("--lookahead-buffer-s", type=float, default=SchedulerConfig.lookahead_buffer_s,
                   help="SchedulerConfig.lookahead_buffer_s (see --always-lookahead)")
    p.add_argument("--costs", choices=["run7", "run10", "run11"], default="run7",
                   help="the device's cost table: runs 5-7 (the code predictor 3.45 ms at every batch), run 10's "
                        "defaults by batch bucket (a batch-1 frame step 3.30 ms), or run 11's (run 10's frame steps, "
                        "the codec's bf16 fast path)")
    p.add_argument("--codec-scale", type=float, default=1.0,
                   help="what-if: every codec call this fraction of the cost table's (e.g. 0.5: twice as fast)")
    p.add_argument("--always-lookahead", action="store_true",
                   help="depth 2 on every step, as the engine ran before the lookahead rule (run 7)")
    args = p.parse_args(argv)
    schedule = tuple(int(x) for x in args.schedule.split(","))
    config = SchedulerConfig(codec_tick_steps=args.codec_tick, codec_tick_urgent_s=args.tick_urgent_s,
                             codec_tick_yields_to_prefill=args.tick_yields_to_prefill,
                             lookahead_buffer_s=None if args.always_lookahead else args.lookahead_buffer_s).validate()
    for rate in (float(r) for r in args.rates.split(",")):
        out = Sim(rate, args.duration, args.seed, args.plan_ms, args.plan_ms_per_row,
                  CODE_PREDICTOR_MS - args.code_predictor_ms, config, schedule, not args.no_early_audio,
                  args.costs in ("run10", "run11"), args.codec_scale,
                  RUN11_CODEC_MS if args.costs == "run11" else CODEC_MS).run()
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
