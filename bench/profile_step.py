"""Where the batch-1 critical path's GPU time goes, kernel by kernel (issue 3's kernel targets).

    python -m bench.profile_step --out bench/results/profile-h200-<commit>.json

1.7B config, random bf16 weights built on the device, Triton path, under torch.profiler (CUDA
activity only):
  code_predictor_frame, talker_step, frame_step   captured graphs at each batch of --batches, as the
        engine replays them (PDL on where supported). Per kernel in launch order: its device start
        and end, and its *increment*: how far it moved the latest end so far. Under PDL a kernel
        starts before the one before it ends (it loads its weights, then waits), so durations
        overlap and their sum says little; the increments add up to the span, and they say which
        launches stand on the critical path and for how long.
  ..._mma     (--cp-mma-rows) the code predictor's frame with its tensor-core passes (kernels/gemv_mma.py)
  ..._nopdl   the same stages with PDL off (the engine's tables without it: the sliced GEMV kernels
        instead of the whole-row ones): durations alone.
  prefill_<T>, prefill_<T>_mma   one prompt of T rows, eager, on cuBLAS and on the tensor-core GEMV
        (`prefill_mma_rows`): per-name sums (run 16: the tensor-core prefill 2.32 ms against 1.60 in
        graphs, although the sweep's products are faster per layer).
Each table groups kernels by name (count, sum and mean of durations and increments) and keeps the
ordered list. The profiler's own tracing adds time between launches of a graph, so the spans here
exceed bench.latency's CUDA-event times; the per-kernel durations are what to read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def _kernels(fn) -> list[dict]:
    """fn() profiled once after warm-up -> its device activities in start order (`ordered`)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return ordered([(ev.name, ev.time_range.start, ev.time_range.end) for ev in prof.events()
                    if ev.device_type == torch.autograd.DeviceType.CUDA])


def ordered(spans: list[tuple[str, float, float]]) -> list[dict]:
    """(name, start, end) in µs -> kernels in start order: start from the first one, duration, and
    increment (how far the kernel moved the latest end seen so far; 0 when it ended inside another)."""
    spans = sorted(spans, key=lambda s: s[1])
    if not spans:
        return []
    t0 = latest = spans[0][1]
    out = []
    for name, start, end in spans:
        out.append({"name": name[:100], "start_us": round(start - t0, 2), "us": round(end - start, 2),
                    "increment_us": round(max(0.0, end - latest), 2)})
        latest = max(latest, end)
    return out


def summary(kernels: list[dict]) -> dict:
    """Ordered kernels -> totals and a per-name table (largest increment first)."""
    by_name: dict[str, list[dict]] = defaultdict(list)
    for k in kernels:
        by_name[k["name"]].append(k)
    table = [{"name": name, "count": len(ks), "sum_us": round(sum(k["us"] for k in ks), 1),
              "mean_us": round(sum(k["us"] for k in ks) / len(ks), 2),
              "increment_sum_us": round(sum(k["increment_us"] for k in ks), 1),
              "increment_mean_us": round(sum(k["increment_us"] for k in ks) / len(ks), 2)}
             for name, ks in by_name.items()]
    table.sort(key=lambda r: -r["increment_sum_us"])
    return {"kernels": len(kernels), "span_us": round(max((k["start_us"] + k["us"] for k in kernels), default=0.0), 1),
            "duration_sum_us": round(sum(k["us"] for k in kernels), 1), "by_name": table, "ordered": kernels}


def _print(name: str, s: dict, top: int = 14) -> None:
    print(f"{name}: {s['kernels']} kernels, span {s['span_us']} us, durations {s['duration_sum_us']} us", flush=True)
    for r in s["by_name"][:top]:
        print(f"  x{r['count']:4d}  incr {r['increment_sum_us']:8.1f} us (mean {r['increment_mean_us']:6.2f})"
              f"  dur mean {r['mean_us']:6.2f} us  {r['name'][:90]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.profile_step")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--batches", default="1", help="comma-separated batch sizes of the graphs profiled")
    p.add_argument("--prefill", default="12,40", help="prompt lengths of the eager prefill profiles")
    p.add_argument("--draw", metavar="WARPS,WINDOW[,WAYS]", help="every draw's launch (bench.sample_kernel's `best`)")
    p.add_argument("--cp-mma-rows", type=int, default=0,
                   help="also profile each batch's code-predictor frame with its passes of up to this many rows past "
                        "the GEMV ones on the tensor-core kernel (`<stage>_b<b>_mma`; kernels/gemv_mma.py)")
    args = p.parse_args(argv)
    from bench.cuda_timing import graph_of
    from bench.sample_kernel import set_draw
    from bench.stages import prefill_every_slot, stage_fns
    from tts_engine.checkpoint import random_model
    from tts_engine.kernels.backend import pdl_supported
    from tts_engine.runtime.options import MAX_PREFILL_MMA_ROWS
    from tts_engine.runtime.runner import ModelRunner

    if not torch.cuda.is_available():
        p.error("bench.profile_step needs a CUDA device")
    _, model = random_model("1.7b", torch.bfloat16, torch.device("cuda"))
    batches = [int(b) for b in args.batches.split(",")]
    runner = ModelRunner(model, max_slots=max(batches), max_context=256)
    t_len = 40
    prefill_every_slot(runner, torch.randn(t_len, runner.cfg.hidden_size, device="cuda", dtype=torch.bfloat16))
    out: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "batches": batches,
                 "draw": set_draw(args.draw)}
    pdl = pdl_supported(runner.device)
    cp = runner.code_predictor
    with torch.inference_mode():
        for b in batches:
            fns = stage_fns(runner, b, t_len)
            for stage in ("code_predictor_frame", "talker_step", "frame_step"):
                out[f"{stage}_b{b}"] = s = summary(_kernels(graph_of(fns[stage])))
                _print(f"{stage} b{b}", s)
            if args.cp_mma_rows and b > cp.gemv_rows:
                before = cp.mma_rows
                cp.mma_rows = args.cp_mma_rows
                try:
                    out[f"code_predictor_frame_b{b}_mma"] = s = summary(_kernels(graph_of(fns["code_predictor_frame"])))
                    _print(f"code_predictor_frame b{b} on the tensor-core kernel", s)
                finally:
                    cp.mma_rows = before
            if pdl and b == 1:  # PDL off (sliced GEMVs in the code predictor): durations alone
                before = cp.pdl, runner.talker_pdl
                cp.pdl, runner.talker_pdl = False, False
                try:
                    for stage in ("code_predictor_frame", "talker_step"):
                        out[f"{stage}_b{b}_nopdl"] = s = summary(_kernels(graph_of(fns[stage])))
                        _print(f"{stage} b{b} without PDL", s)
                finally:
                    cp.pdl, runner.talker_pdl = before
        configured = runner.prefill_mma_rows
        try:
            for t in (int(v) for v in args.prefill.split(",") if v):
                x = torch.randn(t, runner.cfg.hidden_size, device="cuda", dtype=torch.bfloat16)
                for suffix, rows in (("", 0), ("_mma", MAX_PREFILL_MMA_ROWS if runner.use_triton else 0)):
                    if suffix and (not rows or t > rows):
                        continue
                    runner.prefill_mma_rows = rows
                    s = summary(_kernels(lambda x=x: runner.prefill(0, x)))
                    out[f"prefill_{t}{suffix}"] = s
                    _print(f"prefill {t} rows{suffix} (eager)", s, top=10)
        finally:
            runner.prefill_mma_rows = configured
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
