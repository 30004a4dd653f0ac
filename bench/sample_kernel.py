"""The sampling kernel's time per draw by warps a row and by top-k search (run 16's profile: 14 µs of a
118 µs batch-1 code-predictor pass, most of it the top-k threshold's 33 block-wide counts; fewer warps
make each count a shorter reduction, `top_k_window` n makes n of them plus a short walk).

    python -m bench.sample_kernel --out bench/results/sample-kernel-h200-<commit>.json

Code-predictor draws (vocabulary 2048, top-k 50, temperature 0.9, the next input's row gathered) and
talker draws (3072 with the codebook-0 processors), at batch 1 and 64, timed as 20 calls in a CUDA
graph (bench.kernels.graph_ms; launches without PDL), each variant's picks checked against the default's
(8 warps, the key bisection). `best` names the variant with the least code-predictor time at batch 1
plus batch 64 as `--draw WARPS,WINDOW,WAYS` for bench.latency and bench.profile_step.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import torch


def _draw_args(b: int, v: int, g: torch.Generator, talker: bool) -> tuple[torch.Tensor, dict]:
    dev = "cuda"
    logits = (torch.randn(b, v, generator=g) * 3).to(dev)
    kw = dict(do_sample=torch.ones(b, dtype=torch.bool, device=dev), temperature=torch.full((b,), 0.9, device=dev),
              top_k=torch.full((b,), 50, device=dev), top_p=torch.ones(b, device=dev),
              seed=torch.arange(b, device=dev), frame=torch.full((b,), 7, device=dev), codebook=0 if talker else 3)
    if talker:
        kw["codebook0"] = dict(penalty=torch.full((b,), 1.05, device=dev),
                               min_new=torch.zeros(b, dtype=torch.long, device=dev),
                               eos_ok=torch.ones(b, dtype=torch.bool, device=dev), slots=torch.arange(b, device=dev),
                               seen=torch.zeros(b, v, dtype=torch.bool, device=dev),
                               suppress=torch.zeros(v, dtype=torch.bool, device=dev), eos_id=v - 2)
    else:
        kw["gather"] = (torch.randn(v, 1024, device=dev, dtype=torch.bfloat16),
                        torch.empty(b, 1024, device=dev, dtype=torch.bfloat16))
    return logits, kw


def set_draw(spec: str | None) -> dict:
    """`--draw WARPS,WINDOW[,WAYS]` -> sample.DRAW_LAUNCH set for every draw built after it (None: unchanged)."""
    from tts_engine.kernels.sample import DRAW_LAUNCH

    if spec:
        warps, window, *ways = (int(v) for v in spec.split(","))
        ways = ways[0] if ways else 2
        if warps not in (1, 2, 4, 8, 16) or window < 0 or ways not in (2, 3, 4):
            raise ValueError(f"--draw {spec!r}: WARPS in 1, 2, 4, 8, 16, WINDOW >= 0 and WAYS 2, 3 or 4")
        DRAW_LAUNCH.update(num_warps=warps, top_k_window=window, top_k_ways=ways)
    return dict(DRAW_LAUNCH)


# `--parts`: a code predictor's batch-1 draw with less and less of its work, so that the differences say what each
# part costs (name -> what it drops): the first-layer qkv row's gather (from a table as large as the code predictor's,
# out of L2: each input set reads another codebook's slice), the embedding row's, the top-k search, the weighted pick.
PARTS = ("full", "no_qkv_row", "no_gathers", "no_top_k", "greedy")


def draw_parts(launch: dict) -> dict:
    """PARTS' µs a draw (as the sweep's: 20 calls in a graph, no PDL), at `launch` (DRAW_LAUNCH's keys)."""
    from bench.kernels import SETS, graph_ms
    from tts_engine.kernels.sample import sample_rows

    g = torch.Generator().manual_seed(0)
    table = torch.randn(14, 2048, 4096, device="cuda", dtype=torch.bfloat16)  # 235 MB, as the code predictor's
    qkv_rows = torch.empty(1, 4096, device="cuda", dtype=torch.bfloat16)
    sets = [_draw_args(1, 2048, g, talker=False) for _ in range(SETS)]
    out = {}
    for part in PARTS:
        fns = []
        for i, (logits, kw) in enumerate(sets):
            kw = dict(kw)
            if part == "full":
                kw["gather2"] = (table[3 * i], qkv_rows)
            if part in ("no_gathers", "no_top_k", "greedy"):
                del kw["gather"]
            if part == "no_top_k":
                kw["top_k"] = torch.zeros_like(kw["top_k"])
            if part == "greedy":
                kw["do_sample"] = torch.zeros_like(kw["do_sample"])
            fns.append(partial(sample_rows, logits, torch.empty(1, dtype=torch.long, device="cuda"), **launch, **kw))
        out[part] = round(graph_ms(fns) * 1e3, 2)
        print(f"code predictor b1 draw, {part}: {out[part]:6.2f} us", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.sample_kernel")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--parts", action="store_true", help="only the batch-1 draw's parts (PARTS) at DRAW_LAUNCH")
    p.add_argument("--warps", default="8,4", help="warps a row (run 17: 2 and 1 were 1.4-3x slower)")
    p.add_argument("--windows", default="0,12,8/3,6/4",
                   help="top-k searches: top_k_window values (0: the key bisection), N/W for N passes of W ways")
    args = p.parse_args(argv)
    from bench.kernels import SETS, graph_ms
    from tts_engine.kernels.sample import sample_rows

    if not torch.cuda.is_available():
        p.error("bench.sample_kernel needs a CUDA device")
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "us": {}}
    if args.parts:
        from tts_engine.kernels.sample import DRAW_LAUNCH

        out["launch"], out["parts_us"] = dict(DRAW_LAUNCH), draw_parts(dict(DRAW_LAUNCH))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2))
        return 0
    g = torch.Generator().manual_seed(0)
    for name, v, talker in (("code_predictor", 2048, False), ("talker", 3072, True)):
        for b in (1, 64):
            logits, kw = _draw_args(b, v, g, talker)
            ids = {}
            for w in (int(x) for x in args.warps.split(",")):
                for search in args.windows.split(","):
                    window, ways = (int(x) for x in (search.split("/") if "/" in search else (search, 2)))
                    if talker:
                        kw["codebook0"]["seen"].zero_()  # the draw marks its pick: the same state for each
                    picks = torch.empty(b, dtype=torch.long, device="cuda")
                    launch = dict(num_warps=w, top_k_window=window, top_k_ways=ways)
                    sample_rows(logits, picks, **launch, **kw)
                    ids[w, search] = picks.cpu()
                    fns = [partial(sample_rows, logits, torch.empty(b, dtype=torch.long, device="cuda"), **launch, **kw)
                           for _ in range(SETS)]
                    us = graph_ms(fns) * 1e3
                    same = int((ids[w, search] == next(iter(ids.values()))).sum())
                    key = f"{name}_b{b}_w{w}_window{window}x{ways}"
                    out["us"][key], out["us"][key + "_same_picks"] = round(us, 2), same
                    print(f"{name} b{b} warps {w} window {window} x {ways}: {us:6.2f} us a draw, {same}/{b} picks as "
                          "the first variant's", flush=True)
    variants = {k.rsplit("_b1_", 1)[1]: v for k, v in out["us"].items()
                if k.startswith("code_predictor_b1_") and not k.endswith("_same_picks")}
    best = min(variants, key=lambda var: variants[var] + out["us"][f"code_predictor_b64_{var}"])
    warps, search = best.removeprefix("w").split("_window")
    out["best"] = ",".join((warps, *search.split("x")))
    print(f"best: {out['best']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
