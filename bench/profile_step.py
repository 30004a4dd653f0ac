"""Where a frame step's GPU time goes: per-kernel device times of one frame step at batch 1 and 32.

    python -m bench.profile_step --out bench/results/profile.json

Runs the frame step eagerly (Triton path, 1.7B config, random bf16 weights built on the device)
under torch.profiler and sums device time per kernel name. Eager launches leave gaps between
kernels that the captured graph does not have, so the sum of kernel times (not the wall time) is
what to compare with the graph replay time of bench/latency.py: the difference is launch gaps.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def kernel_table(runner, b: int) -> dict:
    slots = torch.arange(b, device="cuda")
    frames = torch.full((b,), 5, device="cuda")
    positions = torch.full((b,), 40, device="cuda")
    text = torch.zeros(b, dtype=torch.long, device="cuda")
    with torch.inference_mode():
        for _ in range(3):
            runner._frame_step(slots, frames, positions, text)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            runner._frame_step(slots, frames, positions, text)
            torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[ev.name].append(ev.device_time_total / 1e3)
    rows = sorted(((name, len(t), sum(t)) for name, t in per_kernel.items()), key=lambda r: -r[2])
    return {"kernels": sum(r[1] for r in rows), "kernel_ms": sum(r[2] for r in rows),
            "top": [{"name": n[:120], "count": c, "ms": round(ms, 4)} for n, c, ms in rows[:40]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.profile_step")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.sampling import SamplingParams

    _, model = random_model("1.7b", torch.bfloat16, torch.device("cuda"))
    runner = ModelRunner(model, max_slots=32, max_context=256)
    runner.k_cache.normal_()
    runner.v_cache.normal_()
    for slot in range(32):
        runner.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
    out = {}
    for b in (1, 32):
        out[b] = kernel_table(runner, b)
        print(f"batch {b}: {out[b]['kernels']} kernels, {out[b]['kernel_ms']:.3f} ms of kernel time", flush=True)
        for r in out[b]["top"][:15]:
            print(f"  {r['ms']:8.4f} ms  x{r['count']:4d}  {r['name']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
