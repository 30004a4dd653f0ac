"""The engine thread's host work per frame row, on a CPU: the real StreamingEngine with a null model.

On the GPU the engine thread's host work (`/metrics`' host parts but the wait) grows with the frame rows
of an iteration, ~90 µs a row on the H100 (docs/performance.md), and with 100+ rows it sets the step
cycle beside the device. This measures the same parts where no GPU is needed: commands, the scheduler
(its codec tick on, as on CUDA), the executor's bookkeeping, reading results and delivering audio to
asyncio consumers, all real; the model is the stand-in. A frame step returns random codes after sleeping
`device_ms` (the GIL released, as a CUDA wait does; subtracted from the launch part), a codec call
returns noise at once, prefills and slot starts do nothing.

Not timed: the CUDA API calls of the launch (graph replays, copies, events), which only the GPU run's
`/metrics` and `--profile-engine` show. `--count-ops` counts what this CPU can of them: the torch ops the
engine thread dispatches outside the stand-in, per iteration and per frame row. On CUDA each is a host-side
dispatch, and each that is no view a kernel launch or a copy. Counting slows the thread: no timings then.

    python -m bench.host_work --rate 100 --seconds 20 [--model DIR] [--profile PATH] [--count-ops] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bench.load.corpus import prompt_for
from bench.load.server_metrics import during, host_per_iteration_ms
from tts_engine.engine.api import AdmissionError, StreamOptions
from tts_engine.engine.core import HOST_PARTS, StreamingEngine
from tts_engine.engine.profile import EngineProfile
from tts_engine.prompt import VoiceSpec
from tts_engine.runtime.runner import StepCodes
from tts_engine.scheduler.config import CODEC_TICK_CUDA, SchedulerConfig

NOISE_FRAMES = 16  # the longest codec call served from the stand-in's noise (the schedule's chunks are <= 12)
_stand_in = threading.local()  # .active: the engine thread is inside the stand-in, whose ops are not counted


class OpCounter(TorchDispatchMode):
    """Counts the torch ops dispatched on the thread that enters it: all, and those that are no view."""

    def __init__(self):
        super().__init__()
        self.ops, self.launching = 0, 0
        self.by_op: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not getattr(_stand_in, "active", False):
            self.ops += 1
            self.by_op[str(func)] += 1
            if not func.is_view:
                self.launching += 1
        return func(*args, **(kwargs or {}))


class _StandIn:
    def __enter__(self):
        _stand_in.active = True

    def __exit__(self, *exc):
        _stand_in.active = False


def null_model(engine: StreamingEngine, device_s: float) -> list[float]:
    """Replace the engine's model work by the stand-in (module docstring). Returns the seconds its frame
    steps have slept so far, a one-element list the stand-in adds to."""
    runner, codec = engine.runner, engine.codec_runner
    slept = [0.0]

    def frame_step_async(slots, frames, positions, step_text, after_codes=None):
        t0 = time.perf_counter()
        time.sleep(device_s)
        slept[0] += time.perf_counter() - t0
        with _StandIn():
            codes = torch.randint(0, 2000, (len(slots), 16))
        if after_codes is not None:
            after_codes(codes)
        return StepCodes(codes, codes, None)

    runner.frame_step_async = frame_step_async
    runner.prefill_prompt = lambda slot, text_ids, codec_ids: None
    runner.start_slot = lambda *args, **kwargs: None
    codec.start = lambda *args, **kwargs: None
    # Loud noise, drawn once (a view of it per call costs the stand-in nothing): the onset trimmer passes it
    # through from the first chunk, as it does for speech.
    noise = torch.randint(-16384, 16384, (engine.max_active, NOISE_FRAMES * 1920), dtype=torch.int16)

    def decode(slots, codes, *, s16=False):
        t = codes.shape[2]
        with _StandIn():
            pcm = noise[:len(slots), :t * 1920] if t <= NOISE_FRAMES else noise[:len(slots)].repeat(1, t)[:, :t * 1920]
            return pcm if s16 else pcm.float() / 32767

    codec.decode = decode
    return slept


async def measure(model: str | Path, rate: float, seconds: float, warmup_s: float, device_ms: float,
                  max_active_streams: int, profile: Path | None, seed: int = 0, count_ops: bool = False) -> dict:
    """Poisson arrivals of the bench's Harvard mix at `rate` for warmup_s + seconds; the host parts over
    the last `seconds`, per engine iteration (count_ops: the engine thread's torch ops instead)."""
    prof = EngineProfile(profile, warmup_s + seconds) if profile is not None else None
    # The codec tick as on CUDA (the CPU default is off): chunks, and so codec calls, as a GPU server has them.
    engine = StreamingEngine(model, device="cpu", scheduler=SchedulerConfig(codec_tick_steps=CODEC_TICK_CUDA),
                             max_active_streams=max_active_streams, max_queued_streams=max_active_streams, profile=prof)
    slept = null_model(engine, device_ms / 1e3)
    counter = OpCounter() if count_ops else None
    if counter is not None:
        run = engine._run

        def counted_run(warmup: bool) -> None:
            with counter:  # a dispatch mode holds for the thread that enters it: the engine thread's ops only
                run(warmup)
        engine._run = counted_run
    await engine.start(warmup=False)
    options = StreamOptions(voice=VoiceSpec(speaker="ryan", language="english"))
    rng = random.Random(seed)
    served = refused = 0

    async def one(text: str) -> None:
        nonlocal served, refused
        try:
            stream = engine.open_stream(options, text, end_input=True)
        except AdmissionError:
            refused += 1
            return
        async for _ in stream.events():
            pass
        served += 1

    tasks, before, t0 = [], None, time.monotonic()
    try:
        for index in itertools.count():
            elapsed = time.monotonic() - t0
            if elapsed >= warmup_s + seconds:
                break
            if before is None and elapsed >= warmup_s:
                before, slept_before = dict(engine.stats), slept[0]
                ops_before = (counter.ops, counter.launching, counter.by_op.copy()) if counter else None
            tasks.append(asyncio.create_task(one(prompt_for(seed, index).text)))
            await asyncio.sleep(rng.expovariate(rate))
        after, slept_s = dict(engine.stats), slept[0] - slept_before
        ops_after = (counter.ops, counter.launching, counter.by_op.copy()) if counter else None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await engine.stop()
    trial = during(before, after)
    iterations = trial["host_iterations"]
    rows = trial["frames"] / max(1, iterations)
    per = host_per_iteration_ms(trial) or {}
    parts = {p: per.get(p, 0.0) for p in HOST_PARTS}
    parts["launch"] -= slept_s / max(1, iterations) * 1e3  # the stand-in's device time, inside the launch
    work = sum(ms for part, ms in parts.items() if part != "wait")
    common = {"rate": rate, "seconds": seconds, "iterations": iterations, "rows_per_iteration": rows,
              "served": served, "refused": refused}
    if counter is not None:
        ops, launching = (a - b for a, b in zip(ops_after[:2], ops_before[:2]))
        top = (ops_after[2] - ops_before[2]).most_common(12)
        n = max(1, iterations)
        return {**common, "ops_per_iteration": ops / n, "launching_ops_per_iteration": launching / n,
                "ops_per_row": ops / n / rows if rows else None,
                "launching_ops_per_row": launching / n / rows if rows else None,
                "top_ops_per_iteration": {name: count / n for name, count in top}}
    return {**common, "device_ms": device_ms, "host_ms_per_iteration": parts, "host_work_ms_per_iteration": work,
            "host_work_us_per_row": work / rows * 1e3 if rows else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.host_work", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint (default: a tiny random-weight one, made here)")
    p.add_argument("--rate", type=float, default=100.0, help="arrivals a second")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before the measurement")
    p.add_argument("--device-ms", type=float, default=10.0, help="the stand-in device's frame step")
    p.add_argument("--max-active-streams", type=int, default=128)
    p.add_argument("--profile", type=Path, default=None, help="the engine thread's cProfile (engine/profile.py)")
    p.add_argument("--count-ops", action="store_true", help="count the engine thread's torch ops (no timings)")
    p.add_argument("--out", type=Path, default=None, help="the result as JSON")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from tts_engine.checkpoint import make_checkpoint
            model = make_checkpoint("tiny", Path(tmp) / "tiny", seed=1)
        result = asyncio.run(measure(model, args.rate, args.seconds, args.warmup, args.device_ms,
                                     args.max_active_streams, args.profile,
                                     count_ops=args.count_ops))
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
