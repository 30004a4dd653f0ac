"""StreamingEngine: one engine thread that turns streams of text into streams of audio.

Data flow of one stream:
  open_stream()  -> validate, admit (or AdmissionError) before any work, command "open"
  engine step    -> commands (commands.py): text is tokenised incrementally (stable BPE tokens only);
                    once the prompt is known the stream queues for a slot (scheduler: QUEUED)
                 -> plan = Scheduler.schedule(now): prefills, one frame batch, codec chunks
                 -> StepExecutor.launch(plan): runs it on the runners without waiting for the GPU
                 -> completed steps (StepPipeline: depth 2 on CUDA, 1 on CPU) -> their codebook 0
                    and PCM -> Scheduler.postprocess -> audio events (onset trimming, word timings),
                    flush-done, done                                       (scheduler: FINISHED)
Every decision comes from the scheduler (`tts_engine/scheduler`, no torch); this file admits
streams and runs the loop, `commands.py` moves their text in, `delivery.py` turns the scheduler's
outputs into events, and `executor.py` touches the tensors.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

from ..loading import load_checkpoint
from ..prompt import resolve_voice
from ..runtime.codec_runner import CodecRunner, served_codec
from ..runtime.options import CODEC_PRECISIONS, FastPathOptions
from ..runtime.runner import ModelRunner
from ..scheduler.config import CODEC_TICK_CUDA, FIRST_AUDIO_SLO_CUDA_S, SchedulerConfig
from ..scheduler.request import Phase
from ..scheduler.scheduler import Scheduler
from .api import (
    AdmissionError,
    EngineUnavailable,
    ErrorEvent,
    StreamOptions,
)
from .commands import Commands
from .delivery import Delivery
from .entry import ISSUE_PARTS, TTFA_PARTS, StreamEntry
from .executor import LaunchedStep, StepExecutor
from .gcpause import GcPauses, freeze_heap, thaw_heap
from .intake import TextIntake
from .pipeline import StepPipeline
from .profile import EngineProfile
from .stream import Stream
from .warmup import warm_up
from .watchdog import Watchdog

log = logging.getLogger(__name__)

# The engine thread's busy iterations, in order: commands, reap + schedule, launch, waiting for the
# device (and early first audio), reading completed steps (engine stats `host_<part>_s`).
HOST_PARTS = ("drain", "plan", "launch", "wait", "read")
# How often a cut-short-able wait for the device looks at its step again (it wakes at once for a
# command): the price is at most this much later reading of a step that could not be cut short.
AWAIT_POLL_S = 1e-4


class StreamingEngine:
    def __init__(self, model_dir: str | Path, *, device: str = "cpu", scheduler: SchedulerConfig | None = None,
                 fast_path: FastPathOptions | None = None, codec_precision: str | None = None,
                 freeze_gc: bool = False, profile: EngineProfile | None = None, prefill_stream: bool | None = None,
                 max_active_streams: int | None = None, max_queued_streams: int | None = None,
                 dtype: torch.dtype | None = None, max_context: int = 2048, max_text_chars: int = 20_000,
                 use_graphs: bool | None = None, use_triton: bool | None = None):
        """scheduler: the scheduling policy and its caps; max_active_streams / max_queued_streams override its caps.
        fast_path: which kernels run where several compute the same step, the codec's included (runtime/options.py).
        codec_precision: fp32 (exact), tf32 (fp32 weights, convs and matmuls on TF32 tensor cores) or bf16
        (weights and activations: what the official package computes when loaded in bf16, its documented use,
        since it loads the speech tokenizer with the model's dtype). None: bf16 on CUDA (lower first audio under
        load than tf32), fp32 on CPU.
        freeze_gc: once warm, exempt the heap from cyclic GC (gcpause.freeze_heap; process-wide, so off by default
        for an embedded engine, on in `cadence serve`).
        profile: a cProfile window over the engine thread (engine/profile.py).
        prefill_stream (CUDA): prefills on a high-priority CUDA stream of their own, beside the steps in flight
        (ModelRunner's prefill_stream; StepExecutor orders it). None: on with CUDA, where it lowers first audio
        under load.
        dtype, max_context, max_text_chars, use_graphs, use_triton: the model's dtype (None: bf16 on CUDA, fp32 on
        CPU), the KV cache's positions, a stream's text limit, and the runner's CUDA graphs and Triton kernels
        (None: on CUDA); tests set them."""
        fast_path = (fast_path or FastPathOptions()).validate()
        if codec_precision not in (None, *CODEC_PRECISIONS):
            raise ValueError(f"codec_precision must be one of {CODEC_PRECISIONS}, got {codec_precision!r}")
        cfg = scheduler or SchedulerConfig()
        caps = {k: v for k, v in (("max_active_streams", max_active_streams),
                                  ("max_queued_streams", max_queued_streams)) if v is not None}
        cfg = replace(cfg, **caps).validate()
        self.device = torch.device(device)
        on_cuda = self.device.type == "cuda"
        if cfg.codec_tick_steps is None:
            cfg = replace(cfg, codec_tick_steps=CODEC_TICK_CUDA if on_cuda else 0)
        if cfg.first_audio_slo_s is None:
            cfg = replace(cfg, first_audio_slo_s=FIRST_AUDIO_SLO_CUDA_S if on_cuda else 0.0)
        if dtype is None:
            dtype = torch.bfloat16 if on_cuda else torch.float32
        ckpt = load_checkpoint(model_dir, device=self.device, dtype=dtype)
        self.path, self.model_config, self.defaults = ckpt.path, ckpt.cfg, ckpt.defaults
        self.tokenizer = ckpt.tokenizer
        self.codec, self.codec_precision = served_codec(ckpt.codec, on_cuda, codec_precision, fast_path)
        if prefill_stream is None:
            prefill_stream = on_cuda
        self.runner = ModelRunner(ckpt.model, max_slots=cfg.max_active_streams, max_context=max_context,
                                  use_graphs=use_graphs, use_triton=use_triton, options=fast_path,
                                  prefill_stream=prefill_stream)
        # The codec state of a stream lives in the codec runner's row of its engine slot.
        self.codec_runner = CodecRunner(self.codec, cfg.max_active_streams, use_graphs=use_graphs,
                                        allow_tf32=self.codec_precision == "tf32")
        self.config = cfg
        self.max_active, self.max_queued = cfg.max_active_streams, cfg.max_queued_streams
        self.max_text_chars = max_text_chars
        mc = self.model_config
        reject = cfg.reject_predicted_underrun if cfg.reject_predicted_underrun is not None else on_cuda
        self.scheduler = Scheduler(cfg, self.runner.buckets, mc.tts_eos_token_id, mc.tts_pad_token_id,
                                   reject_predicted_underrun=reject)
        # Random weights never stop on EOS: their length comes from the text (forced_frames).
        self.executor = StepExecutor(self.runner, self.codec_runner, eos_allowed=not mc.is_random)
        self._eos_id = None if mc.is_random else mc.talker.codec_eos_token_id
        self.pipeline = StepPipeline(cfg.pipeline_depth or (2 if on_cuda else 1))
        self.intake = TextIntake(self.tokenizer, self.model_config, self.defaults, self.runner.max_context)
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._entries: dict[str, StreamEntry] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._interrupted = False  # this iteration's wait for the device was cut short by a command
        self._ready = threading.Event()
        self.fault: BaseException | None = None
        self.step_count = 0
        self.stats = {"finished": 0, "cancelled": 0, "frames": 0, "last_step_ms": 0.0, "last_batch": 0,
                      "ttfa_sum_s": 0.0, "ttfa_count": 0, "invariant_violations": 0,
                      **{f"ttfa_{part}_sum_s": 0.0 for part in (*TTFA_PARTS, "issue", *ISSUE_PARTS)},
                      **{f"host_{part}_s": 0.0 for part in HOST_PARTS}, "host_launch_cpu_s": 0.0, "host_cpu_s": 0.0,
                      "host_iterations": 0, "host_iteration_max_s": 0.0,
                      **{f"device_{part}_s": 0.0 for part in ("busy", "frame", "codec")}}
        self.delivery = Delivery(self.scheduler, self._entries, self.stats)  # events out to the streams
        self.commands = Commands(self._commands, self.intake, self.tokenizer, self.scheduler, self.delivery,
                                 self._entries)  # and commands in
        self.freeze_gc = freeze_gc
        self.profile = profile
        self.gc_pauses = GcPauses()
        self.watchdog = Watchdog(lambda: self.step_count, self._busy, cfg.watchdog_stall_s, on_stall=self._report_stall)

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.fault is None and not self._stopping and not self.stalled

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.fault is None

    @property
    def stalled(self) -> bool:
        """The watchdog saw no loop progress for `watchdog_stall_s` while work was pending."""
        return self.watchdog.stalled

    def start_thread(self, warmup: bool = True) -> None:
        self._thread = threading.Thread(target=self._run, args=(warmup,), name="cadence-engine", daemon=True)
        self.gc_pauses.install()
        self._thread.start()
        self.watchdog.start()

    async def start(self, warmup: bool = True) -> None:
        self.start_thread(warmup)
        await asyncio.get_running_loop().run_in_executor(None, self._ready.wait)
        if self.fault is not None:
            raise EngineUnavailable(f"engine failed during warm-up: {self.fault}")

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        loop = asyncio.get_running_loop()
        if self._thread is not None:
            await loop.run_in_executor(None, self._thread.join, 10)
        await loop.run_in_executor(None, self.watchdog.stop)
        self.gc_pauses.remove()
        if self.gc_pauses.frozen_objects:
            # What the engine froze is collectable again: left frozen, the interpreter's exit never
            # frees it, and triton's bindings then report every object of theirs as leaked.
            thaw_heap()
            self.gc_pauses.frozen_objects = 0

    def metrics(self) -> dict[str, float]:
        adm = self.scheduler.admission
        with adm.lock:
            admitted, counts = adm.admitted, dict(adm.counts)
        active = sum(1 for e in list(self._entries.values()) if e.state.phase is Phase.DECODING)
        return {**self.stats, **counts, **self.scheduler.metrics(), **self.gc_pauses.stats(),
                "active_streams": admitted, "decoding_streams": active, "queued_streams": admitted - active,
                "steps": self.step_count, "pipeline_depth": self.pipeline.depth, "ready": float(self.ready),
                "healthy": float(self.fault is None and not self.stalled), "stalled": float(self.stalled),
                "stalled_for_s": self.watchdog.stalled_for_s(), "watchdog_stalls": self.watchdog.stalls}

    # -- admission (caller's thread) ---------------------------------------------------------------
    def check_text(self, chars: int) -> None:
        """`chars`: the stream's whole text so far."""
        if chars > self.max_text_chars:
            raise ValueError(f"text is longer than {self.max_text_chars} characters")

    def open_stream(self, options: StreamOptions, text: str = "", *, end_input: bool = False) -> Stream:
        if not self.ready:
            why = "engine is stalled" if self.stalled else "engine is not ready" if self.fault is None \
                else f"engine failed: {self.fault}"
            raise EngineUnavailable(why)
        options.validate()
        resolve_voice(self.model_config, options.voice)
        self.check_text(len(text))
        if end_input and not text.strip():
            raise ValueError("text is empty")
        loop = asyncio.get_running_loop()
        adm = self.scheduler.admission
        # The open command is queued under the admission lock, so that "admitted == streams the
        # engine holds" is exact whenever the command queue is empty (the idle invariant check).
        with adm.lock:
            decision = adm.try_admit()
            if not decision.admitted:
                raise AdmissionError(decision.reason, retry_after_s=decision.retry_after_s)
            handle = Stream(self, f"s{next(self._ids)}", loop)
            handle.text_chars = len(text)
            self.command("open", handle.id, (handle, options, text, end_input))
        return handle

    def command(self, kind: str, stream_id: str, payload=None) -> None:
        self._commands.put((kind, stream_id, payload))
        self._wake.set()
        if self.fault is not None:  # the engine thread is gone: nothing else will drain this
            self._fail_pending_opens()

    # -- engine thread -----------------------------------------------------------------------------
    def _run(self, warmup: bool) -> None:
        try:
            if warmup:
                warm_up(self.runner, self.codec_runner, self.stats)
            if self.freeze_gc:
                self.gc_pauses.frozen_objects = freeze_heap()
                log.info("gc: %d objects exempt from cyclic collection", self.gc_pauses.frozen_objects)
            self.gc_pauses.reset()
            self._ready.set()
            while not self._stopping:
                busy = self._step()
                if self.profile is not None:
                    self.profile.tick(busy)
                if not busy:
                    self._check_invariants()
                    self._wake.wait(0.05)
                    self._wake.clear()
            if self.profile is not None:
                self.profile.close()
        except BaseException as exc:  # an engine fault must reach every stream
            self.fault = exc
            log.exception("engine fault")
            self.delivery.flush()  # what was already produced goes out before the error
            for entry in list(self._entries.values()):
                entry.handle.deliver(ErrorEvent(entry.state.id, f"engine failure: {exc}", "engine_error"))
            self._entries.clear()
            self._fail_pending_opens()
            self._ready.set()
            raise

    def _fail_pending_opens(self) -> None:
        """After a fault: streams whose open command was never drained get the error too."""
        while True:
            try:
                kind, sid, payload = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "open":
                payload[0].deliver(ErrorEvent(sid, f"engine failure: {self.fault}", "engine_error"))

    def _step(self) -> bool:
        """One engine iteration: commands, plan + launch, read completed steps. False when idle.
        Busy iterations add their host time to stats `host_<part>_s` (HOST_PARTS), so /metrics
        shows where the engine thread's time goes under load."""
        clock, cpu = time.perf_counter, time.thread_time
        t0, c0 = clock(), cpu()
        did = self.commands.drain()
        t1 = clock()
        did |= self.delivery.act(self.scheduler.reap())
        now = time.monotonic()
        plan = self.scheduler.schedule(now)
        t2, c2 = clock(), cpu()
        if not plan.empty:
            self.pipeline.push(self.executor.launch(plan, self._entries))
            did = True
        t3, c3 = clock(), cpu()
        depth = None if self.scheduler.wants_lookahead(now) else 1
        read_s = 0.0
        self._interrupted = False
        for launched in self.pipeline.completed(must_wait=plan.empty, before_wait=self._deliver_early, depth=depth,
                                                wait=self._await_step):
            r0 = clock()
            self._read(launched)
            read_s += clock() - r0
            did = True
        self.delivery.flush()
        self.step_count += 1
        did |= self._interrupted
        if did:
            # wait: the device (events, early first audio included), the rest is Python and launches
            for part, seconds in zip(HOST_PARTS, (t1 - t0, t2 - t1, t3 - t2, clock() - t3 - read_s, read_s)):
                self.stats[f"host_{part}_s"] += seconds
            # The thread's CPU time: launch wall time well above its CPU time is time spent blocked
            # (the GIL, a blocking copy), not Python or CUDA API work. (A CUDA wait may spin: the
            # whole iteration's CPU time counts it.)
            self.stats["host_launch_cpu_s"] += c3 - c2
            self.stats["host_cpu_s"] += cpu() - c0
            self.stats["host_iterations"] += 1
            # A stall (a collection, the GIL held elsewhere) shows here first: streams are fed once an iteration.
            self.stats["host_iteration_max_s"] = max(self.stats["host_iteration_max_s"], clock() - t0)
        return did

    def _read(self, launched: LaunchedStep) -> None:
        result = launched.result(self._eos_id)
        device_s = launched.device_s()
        if device_s is not None:  # beside host_<part>_s: which of the two sets the step cycle, and what fills it
            t = result.timings
            self.stats["device_busy_s"] += device_s
            self.stats["device_frame_s"] += t.frame_s or 0.0
            self.stats["device_codec_s"] += sum(t.chunk_s)
        if launched.plan.frames is not None:  # the batch and time of the latest frame step
            self.stats["last_batch"] = len(launched.plan.frames.rows)
            if result.timings.frame_s is not None:
                self.stats["last_step_ms"] = result.timings.frame_s * 1e3
        self.delivery.act(self.scheduler.postprocess(result), launched)
        self.stats["frames"] = self.scheduler.stats["frames"]

    def _await_step(self, launched: LaunchedStep) -> bool:
        """Wait for a step beside which another could still be launched (pipeline.completed's
        `wait`). Its early first audio goes out as soon as it is on the host. A command that arrives
        meanwhile (a stream opened, text appended) cuts the wait short: False, and the next iteration
        drains it and queues the new stream's prefill behind this step at once, instead of after
        this step, its reading and the next plan (up to 10 ms at 40 req/s before a new stream's
        command is even drained)."""
        while True:
            if not launched.early_delivered and launched.early_ready():
                self._deliver_early(launched)
            if launched.early_delivered and launched.ready():
                return True
            if not self._commands.empty():
                self._interrupted = True
                return False
            self._wake.wait(AWAIT_POLL_S)
            self._wake.clear()

    def _deliver_early(self, launched: LaunchedStep) -> None:
        """Early first audio (Delivery.early); pipeline.completed's before_wait."""
        self.delivery.early(launched, self._eos_id)

    # -- health --------------------------------------------------------------------------------------
    def _busy(self) -> bool:
        return self.scheduler.has_work() or not self._commands.empty() or len(self.pipeline) > 0

    def check_invariants(self) -> list[str]:
        """Invariants that hold between steps when nothing is in flight (engine thread, or a
        stopped engine)."""
        out = self.scheduler.violations(idle=self._nothing_in_flight())
        adm = self.scheduler.admission
        with adm.lock:
            if self._commands.empty() and adm.admitted != len(self.scheduler.streams):
                out.append(f"admitted {adm.admitted} != {len(self.scheduler.streams)} live streams")
        if set(self._entries) != set(self.scheduler.streams):
            out.append(f"engine entries {sorted(self._entries)} != scheduler streams {sorted(self.scheduler.streams)}")
        return out

    def _nothing_in_flight(self) -> bool:
        return len(self.pipeline) == 0

    def _check_invariants(self) -> None:
        if not self._nothing_in_flight():
            return
        violations = self.check_invariants()
        if not violations:
            return
        self.stats["invariant_violations"] += len(violations)
        log.error("engine invariants violated: %s", "; ".join(violations))
        if self.config.raise_on_invariant_violation:
            raise RuntimeError("engine invariants violated: " + "; ".join(violations))

    def _report_stall(self, seconds: float) -> None:
        frame = sys._current_frames().get(self._thread.ident) if self._thread is not None else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no engine thread)"
        log.error("engine stalled for %.1f s: %s\nengine thread:\n%s", seconds, self.scheduler.metrics(), stack)
