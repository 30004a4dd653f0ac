"""Codec chunk latency through CodecRunner: eager vs CUDA graphs, first chunk vs incremental.

    python -m bench.codec_latency --out bench/results/codec_latency.json

Real codec config with random weights (the cost does not depend on the weights). For each chunk
length t and batch B: B streams each decode a t-frame chunk in one `CodecRunner.decode` call
(batches above the largest bucket are split, as the engine does). "first": the slots were just
reset, as for a stream's first audio; "incremental": the slots are 96 frames in (K/V window full).
Times are CUDA-event medians over `runs` calls, codes coming from host memory as in the engine;
`wall_ms` is the host-side median of the same calls (launch overhead included, up to completion).
`codec_latency()` is importable by other benchmark code.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

CHUNKS = (1, 2, 4, 8, 12)
BATCHES = (1, 8, 32)
PRIMED_FRAMES = 96


def _time_ms(fn: Callable[[], object], setup: Callable[[], object], runs: int, warmup: int) -> dict[str, float]:
    """Median CUDA-event and wall times of fn() over `runs` calls; setup() runs untimed before each."""
    gpu, wall = [], []
    for i in range(warmup + runs):
        setup()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            wall.append((time.perf_counter() - t0) * 1e3)
            gpu.append(start.elapsed_time(end))
    return {"median_ms": round(statistics.median(gpu), 4), "p90_ms": round(statistics.quantiles(gpu, n=10)[-1], 4),
            "wall_ms": round(statistics.median(wall), 4)}


def _rows(runner, mode: str, b: int, t: int, runs: int, warmup: int, gen: torch.Generator) -> list[dict]:
    slots = list(range(b))
    primed = torch.randint(0, 2048, (b, 16, PRIMED_FRAMES), generator=gen)
    codes = torch.randint(0, 2048, (b, 16, t), generator=gen)

    def reset():
        for s in slots:
            runner.reset(s)

    def decode():
        runner.decode(slots, codes)

    rows = [{"mode": mode, "phase": "first", "t": t, "batch": b, **_time_ms(decode, reset, runs, warmup)}]
    reset()
    runner.decode(slots, primed)
    rows.append({"mode": mode, "phase": "incremental", "t": t, "batch": b,
                 **_time_ms(decode, lambda: None, runs, warmup)})
    return rows


def codec_latency(codec, *, chunks=CHUNKS, batches=BATCHES, runs: int = 50, warmup: int = 5,
                  modes=("eager", "graph")) -> dict[str, object]:
    """Per-chunk decode times of `codec` (a CodecDecoder on CUDA) through CodecRunner."""
    from tts_engine.runtime.codec_runner import CodecRunner

    out: dict[str, object] = {"results": []}
    gen = torch.Generator().manual_seed(0)
    for mode in modes:
        runner = CodecRunner(codec, max(batches), use_graphs=mode == "graph")
        if mode == "graph":
            out["capture"] = runner.capture()
        for b in batches:
            for t in chunks:
                for row in _rows(runner, mode, b, t, runs, warmup, gen):
                    out["results"].append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        del runner
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.codec_latency")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--batches", default=",".join(map(str, BATCHES)))
    p.add_argument("--chunks", default=",".join(map(str, CHUNKS)))
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    from tts_engine.config import CONFIG_DIR, CodecConfig
    from tts_engine.model.codec_init import random_codec_decoder

    if not torch.cuda.is_available():
        print("bench.codec_latency needs a CUDA device", file=sys.stderr)
        return 2
    cfg = CodecConfig.from_file(CONFIG_DIR / "speech_tokenizer.config.json")
    codec = random_codec_decoder(cfg).to("cuda", getattr(torch, args.dtype))
    result: dict[str, object] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                 "python": platform.python_version(), "dtype": args.dtype,
                                 "tf32": False, "runs": args.runs}
    result.update(codec_latency(codec, chunks=tuple(int(x) for x in args.chunks.split(",")),
                                batches=tuple(int(x) for x in args.batches.split(",")), runs=args.runs))
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
