"""The engine thread's host work per frame row, on a CPU: the real StreamingEngine with a null model.

On the GPU the engine thread's host work (`/metrics`' host parts but the wait) grows with the frame rows
of an iteration, ~90 µs a row on the H100 (docs/performance.md), and with 100+ rows it sets the step
cycle beside the device. This measures the same parts where no GPU is needed: commands, the scheduler,
the executor's bookkeeping, reading results and delivering audio to asyncio consumers, all real; the
model is the stand-in. A frame step returns random codes after sleeping `device_ms` (the GIL released,
as a CUDA wait does; subtracted from the launch part), a codec call returns noise at once, prefills
and slot starts do nothing. Not measured: the CUDA API calls of the launch (graph replays, copies,
events), which only the GPU run's `/metrics` and `--profile-engine` show.

    python -m bench.host_work --rate 100 --seconds 20 [--model DIR] [--profile PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.load.corpus import prompt_for
from bench.load.server_metrics import during, host_per_iteration_ms
from tts_engine.engine.api import AdmissionError, StreamOptions
from tts_engine.engine.core import HOST_PARTS, StreamingEngine
from tts_engine.engine.profile import EngineProfile
from tts_engine.prompt import VoiceSpec
from tts_engine.runtime.runner import StepCodes

NOISE_FRAMES = 16  # the longest codec call served from the stand-in's noise (the schedule's chunks are <= 12)


def null_model(engine: StreamingEngine, device_s: float) -> list[float]:
    """Replace the engine's model work by the stand-in (module docstring). Returns the seconds its frame
    steps have slept so far, a one-element list the stand-in adds to."""
    runner, codec = engine.runner, engine.codec_runner
    slept = [0.0]

    def frame_step_async(slots, frames, positions, step_text, after_codes=None):
        t0 = time.perf_counter()
        time.sleep(device_s)
        slept[0] += time.perf_counter() - t0
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
    noise = torch.rand(engine.max_active, NOISE_FRAMES * 1920) - 0.5

    def decode(slots, codes):
        t = codes.shape[2]
        return noise[:len(slots), :t * 1920] if t <= NOISE_FRAMES else torch.rand(len(slots), t * 1920) - 0.5

    codec.decode = decode
    return slept


async def measure(model: str | Path, rate: float, seconds: float, warmup_s: float, device_ms: float,
                  max_active_streams: int, profile: Path | None, seed: int = 0) -> dict:
    """Poisson arrivals of the bench's Harvard mix at `rate` for warmup_s + seconds; the host parts over
    the last `seconds`, per engine iteration."""
    prof = EngineProfile(profile, warmup_s + seconds) if profile is not None else None
    engine = StreamingEngine(model, device="cpu", max_active_streams=max_active_streams,
                             max_queued_streams=max_active_streams, profile=prof)
    slept = null_model(engine, device_ms / 1e3)
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
            tasks.append(asyncio.create_task(one(prompt_for(seed, index).text)))
            await asyncio.sleep(rng.expovariate(rate))
        after, slept_s = dict(engine.stats), slept[0] - slept_before
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
    return {"rate": rate, "seconds": seconds, "device_ms": device_ms, "iterations": iterations,
            "rows_per_iteration": rows, "host_ms_per_iteration": parts, "host_work_ms_per_iteration": work,
            "host_work_us_per_row": work / rows * 1e3 if rows else None, "served": served, "refused": refused}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.host_work", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint (default: a tiny random-weight one, made here)")
    p.add_argument("--rate", type=float, default=100.0, help="arrivals a second")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds before the measurement")
    p.add_argument("--device-ms", type=float, default=10.0, help="the stand-in device's frame step")
    p.add_argument("--max-active-streams", type=int, default=128)
    p.add_argument("--profile", type=Path, default=None, help="the engine thread's cProfile (engine/profile.py)")
    p.add_argument("--out", type=Path, default=None, help="the result as JSON")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from tts_engine.checkpoint import make_checkpoint
            model = make_checkpoint("tiny", Path(tmp) / "tiny", seed=1)
        result = asyncio.run(measure(model, args.rate, args.seconds, args.warmup, args.device_ms,
                                     args.max_active_streams, args.profile))
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
