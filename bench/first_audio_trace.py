"""Where an idle engine's time to first audio goes: one request's GPU timeline between the caller's
open and its first audio, from torch.profiler (CUPTI: every kernel, those replayed inside CUDA graphs
included, and the CUDA runtime calls that launched them).

The socket figure (issue 3) is ~10.4 ms of engine time of which the stages account for ~8.6 ms of GPU
work; this says where the rest is: before the first kernel (the host's open, plan and launch), gaps
between kernels (the device waiting for the host), and after the last kernel (reading the step,
delivering the audio). The engine runs in-process as `cadence serve` runs it (defaults, GIL switch
interval 0.5 ms, GC frozen), its first audio taken from its event stream, not a socket.

    python -m bench.first_audio_trace --model /tmp/ckpt --out first-audio-trace.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

OPEN, AUDIO = "cadence.open", "cadence.first_audio"
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # Chrome-trace categories of work on the GPU


def timeline(trace: dict, gap_us: float = 15.0) -> dict:
    """A Chrome trace (torch.profiler's export) with OPEN and AUDIO annotations -> the device's work
    between them (kernels, copies, memsets): µs from the open to the first of it, busy time (their
    union), every gap over `gap_us` with the work around it and the runtime calls made meanwhile, and
    the end of the last to the audio."""
    events = trace["traceEvents"]
    marks = {e["name"]: float(e["ts"]) for e in events if e.get("name") in (OPEN, AUDIO) and "ts" in e}
    if OPEN not in marks or AUDIO not in marks:
        raise ValueError(f"the trace lacks the {OPEN} / {AUDIO} annotations")
    t0, t1 = marks[OPEN], marks[AUDIO]
    kernels = sorted(((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e["name"]) for e in events
                      if e.get("cat") in DEVICE_WORK and t0 <= float(e["ts"]) <= t1), key=lambda k: k[0])
    runtime = sorted((float(e["ts"]), e["name"]) for e in events
                     if e.get("cat") == "cuda_runtime" and t0 <= float(e["ts"]) <= t1)
    if not kernels:
        return {"open_to_audio_us": t1 - t0, "kernels": 0}
    busy, gaps, end, last = 0.0, [], kernels[0][0], None  # last: the kernel that ends at `end`
    for start, stop, name in kernels:
        if start > end:
            if last is not None and start - end > gap_us:
                calls = [n for ts, n in runtime if end <= ts <= start]
                gaps.append({"at_us": round(end - t0, 1), "gap_us": round(start - end, 1), "after": last[:80],
                             "before": name[:80], "runtime_calls": calls[:8]})
            busy += stop - start
        else:
            busy += max(0.0, stop - end)
        if stop > end or last is None:
            end, last = stop, name
    launches = [round(ts - t0, 1) for ts, n in runtime if "GraphLaunch" in n]
    return {"open_to_audio_us": round(t1 - t0, 1), "open_to_first_kernel_us": round(kernels[0][0] - t0, 1),
            "first_kernel": kernels[0][2][:80], "kernels": len(kernels), "busy_us": round(busy, 1),
            "span_us": round(end - kernels[0][0], 1),
            "gaps_over_threshold_us": round(sum(g["gap_us"] for g in gaps), 1),
            "last_kernel_to_audio_us": round(t1 - end, 1), "graph_launches_at_us": launches,
            "gaps": sorted(gaps, key=lambda g: -g["gap_us"])[:12]}


async def _first_audio(engine, text: str, seed: int) -> None:
    from tts_engine.engine.api import AudioEvent, StreamOptions
    from tts_engine.prompt import VoiceSpec
    from tts_engine.sampling import SamplingParams

    options = StreamOptions(VoiceSpec("ryan"), SamplingParams(seed=seed), silence_threshold_dbfs=None)
    with torch.profiler.record_function(OPEN):
        stream = engine.open_stream(options, text, end_input=True)
    marked = False
    async for event in stream.events():
        if isinstance(event, AudioEvent) and not marked:
            with torch.profiler.record_function(AUDIO):
                marked = True


async def run(model: Path, requests: int, warmup: int) -> list[dict]:
    from bench.socket_latency import corpus
    from tts_engine.engine.core import StreamingEngine

    sys.setswitchinterval(0.0005)
    engine = StreamingEngine(model, device="cuda", freeze_gc=True)
    await engine.start()
    texts = corpus()
    try:
        for i in range(warmup):
            await _first_audio(engine, texts[i % len(texts)], seed=i)
        out = []
        for i in range(requests):
            await asyncio.sleep(0.2)  # idle: nothing in flight
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                await _first_audio(engine, texts[(warmup + i) % len(texts)], seed=100 + i)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "trace.json"
                prof.export_chrome_trace(str(path))
                result = timeline(json.loads(path.read_text()))
            print(f"first audio trace {i}: {json.dumps(result)}", flush=True)
            out.append(result)
        return out
    finally:
        await engine.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.first_audio_trace")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--requests", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args(argv)
    traces = asyncio.run(run(args.model, args.requests, args.warmup))
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "commit": os.environ.get("CADENCE_COMMIT", "unknown"), "traces": traces}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
