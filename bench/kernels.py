"""Per-kernel GPU times at the 1.7B shapes: each Triton kernel against its torch reference, the
versions of decode attention (v1: one program per row and kv head; v2: split-KV, the default; v3:
split-KV with tensor-core products, opt-in until timed here), the cuBLAS products of one
talker layer against their weight-read floor, and the fused small-batch GEMV (kernels/gemv.py)
against cuBLAS plus the epilogue kernel it replaces, at talker and code-predictor shapes.

    python -m bench.kernels --out bench/results/kernels.json
    python -m bench.kernels --out ... --gemv-sweep [--shapes talker]
                                                      only the GEMV's launch configurations against
                                                      cuBLAS at the code predictor's (talker's) four shapes


A time is the median over replays of a CUDA graph that launches the op 20 times back to back
(inputs rotate over 4 sets, so repeated reads do not all hit L2), divided by 20: the cost of the op
inside a captured step, launch gaps included. Correctness is checked by tests/kernels.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from tts_engine.kernels.gemv import LATE_SUM

CALLS, SETS = 20, 4


def graph_ms(fns) -> float:
    """fns: SETS callables (one per input set) -> ms per call inside a graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CALLS):
            fns[i % SETS]()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / CALLS)
    return statistics.median(times)


def rnd(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def _attention_v1(q, k_cache, v_cache, rows, lengths):
    """Version 1 of the decode-attention kernel (one program per row and kv head), as it launched."""
    from tts_engine.kernels import decode_attention as da

    b, hq, d = q.shape
    hkv = k_cache.shape[1]
    out = torch.empty_like(q)
    da._decode_attention_kernel[(b, hkv)](
        q, k_cache, v_cache, out, rows, lengths, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), out.stride(0), out.stride(1), 1.0 / math.sqrt(d), GROUP=hq // hkv, D=d, BLOCK_N=32)
    return out


# The code predictor's products per layer at batch 1 (1.7B: hidden 1024, 16 q / 8 kv heads of 128,
# intermediate 3072): (name, rows of w, K, epilogue).
CP_SHAPES = (("cp qkv", 4096, 1024, None), ("cp o+residual", 1024, 2048, "residual"),
             ("cp gate_up+silu", 6144, 1024, "silu"), ("cp down+residual", 1024, 3072, "residual"))
# The talker's (hidden 2048, 16 q / 8 kv heads of 128, intermediate 6144).
TALKER_SHAPES = (("talker qkv", 4096, 2048, None), ("talker o+residual", 2048, 2048, "residual"),
                 ("talker gate_up+silu", 12288, 2048, "silu"), ("talker down+residual", 2048, 6144, "residual"))
SHAPES = {"cp": CP_SHAPES, "talker": TALKER_SHAPES}
GEMV_CONFIGS = [dict(block_n=bn, block_k=bk, late_sum=late, stages=st, num_warps=4)
                for bn in (4, 8, 16) for bk in (256, 512) for late in (False, True) for st in (1, 3)
                if not (bn == 16 and bk == 512 and late)]  # [16, 512] fp32 partial products spill
# Whole rows of K=1024 per slice: each program issues all its loads at once, so more of the matrix is
# in flight than with 256-wide slices (the run-5 kernel was latency-bound at ~8 slices a program).
GEMV_CONFIGS += [dict(block_n=bn, block_k=1024, late_sum=False, stages=st, num_warps=w)
                 for bn in (1, 2, 4) for w in (4, 8) for st in (1, 2) if not (bn == 4 and st == 2)]
# Narrow slices reduced as they go, meant for 4-16 rows ([rows, block_n, block_k] fp32 products in
# registers); run 9 measured them at 2-16 rows: slower than cuBLAS past 2-4 rows, as every GEMV here.
GEMV_CONFIGS += [dict(block_n=bn, block_k=bk, late_sum=False, stages=3, num_warps=4)
                 for bn in (2, 4, 8) for bk in (64, 128)]
# Whole rows of w per program (`whole_rows`, any K: the talker's 2048 and 6144), the kernel the PDL
# launches use; and the same with PDL (`PDL_CONFIGS`, swept where the GPU supports it: each call of the
# graph then overlaps the one before, as a chain of a step's products does).
GEMV_CONFIGS += [dict(block_n=bn, whole_rows=True, num_warps=w) for bn in (1, 2, 4) for w in (4, 8)]
PDL_CONFIGS = [{**cfg, "pdl": True} for cfg in GEMV_CONFIGS if cfg.get("whole_rows")]
PDL_CONFIGS += [dict(block_n=bn, block_k=bk, pdl=True, **LATE_SUM) for bn in (4, 8, 16) for bk in (256, 512)
                if not (bn == 16 and bk == 512)]
# The tensor-core kernel (rows padded to 16), swept at batches past 2 instead of the above; with PDL too where the
# GPU supports it (run 24: the code predictor's passes on it, PDL and all, lost to cuBLAS; each product timed alone
# here says which of them loses, and by how much).
MMA_CONFIGS = [dict(mma=True, block_n=bn, block_k=bk, stages=st, num_warps=4)
               for bn in (16, 32) for bk in (128, 256, 512) for st in (3, 4) if not (bn == 32 and bk == 512)]
# Products whose input a decoder layer normalises first (qkv, gate/up): at batches past 2 also timed with the
# RMSNorm, a launch of its own before cuBLAS, in the tensor-core kernel's prologue ("norm": True rows).
NORMED = ("qkv", "gate_up")


def gemv_sweep(batch: int = 1, shapes=CP_SHAPES) -> list[dict]:
    """Each launch configuration of the fused GEMV against cuBLAS (+ its separate epilogue) at `batch`
    rows, µs."""
    from tts_engine.kernels.backend import pdl_supported
    from tts_engine.kernels.gemv import gemv
    from tts_engine.kernels.rms_norm import rms_norm
    from tts_engine.kernels.silu_mul import silu_mul

    pdl = pdl_supported(torch.device("cuda"))
    eps = 1e-6

    rows = []
    with torch.inference_mode():
        for name, n, k, epilogue in shapes:
            x, ws = rnd(batch, k), [rnd(n, k) for _ in range(SETS)]
            res, ln = rnd(batch, n), rnd(k)
            for norm in (False, True) if batch > 2 and name.split()[1].split("+")[0] in NORMED else (False,):
                def inp(x, norm=norm, ln=ln):  # cuBLAS' input: the RMSNorm a launch of its own before it
                    return rms_norm(x, ln, eps) if norm else x

                if epilogue == "silu":
                    ref = [partial(lambda x, w: silu_mul(F.linear(inp(x), w)), x, w) for w in ws]
                elif epilogue == "residual":
                    ref = [partial(lambda x, w, r: r + F.linear(inp(x), w), x, w, res) for w in ws]
                else:
                    ref = [partial(lambda x, w: F.linear(inp(x), w), x, w) for w in ws]
                floor_us = n * k * 2 / 4.19e12 * 1e6
                cublas = graph_ms(ref) * 1e3
                tag = {"norm": True} if norm else {}
                rows.append({"op": name, "batch": batch, "impl": "cublas", **tag, "us": round(cublas, 2),
                             "floor_us": round(floor_us, 2)})
                what = f"{name}{' (normed)' if norm else ''}"
                print(f"{what:<29} b{batch:<3} cublas {cublas:7.2f} us (floor {floor_us:.2f})", flush=True)
                kw = {"silu_mul": epilogue == "silu", "residual": res if epilogue == "residual" else None,
                      "norm": (ln, eps) if norm else None}
                if batch > 2:
                    configs = MMA_CONFIGS + ([{**cfg, "pdl": True} for cfg in MMA_CONFIGS] if pdl else [])
                else:
                    configs = GEMV_CONFIGS + (PDL_CONFIGS if pdl else [])
                for cfg in configs:
                    try:
                        us = graph_ms([partial(gemv, x, w, **kw, **cfg) for w in ws]) * 1e3
                    except Exception as e:  # a configuration that does not compile or run here
                        rows.append({"op": name, "batch": batch, "impl": "gemv", **tag, **cfg,
                                     "error": f"{type(e).__name__}: {e}"[:200]})
                        continue
                    rows.append({"op": name, "batch": batch, "impl": "gemv", **tag, **cfg, "us": round(us, 2)})
                best = min((r for r in rows if r["op"] == name and "us" in r and r["impl"] == "gemv"
                            and r.get("norm", False) == norm), key=lambda r: r["us"], default=None)
                if best is not None:
                    print(f"{what:<29} b{batch:<3} best gemv {best['us']:7.2f} us {_config_of(best)}", flush=True)
    return rows


def _config_of(row: dict) -> dict:
    """A sweep row's launch configuration (the keyword arguments of `gemv`)."""
    return {k: row[k] for k in ("mma", "whole_rows", "pdl", *GEMV_CONFIGS[0]) if k in row}


def best_launch(sweep: list[dict], model: str, batch: int) -> dict[str, dict]:
    """A sweep's rows -> the fastest launch configuration per product of `model` ("cp", "talker") at
    `batch` rows, keyed as the runners' launch tables are ("qkv", "o", "gate_up", "down")."""
    out = {}
    for name, *_ in SHAPES[model]:
        timed = [r for r in sweep if r["op"] == name and r["batch"] == batch and r["impl"] == "gemv" and "us" in r
                 and not r.get("norm")]  # (the same product with its norm prologue: other work)
        if not timed:
            raise ValueError(f"the sweep has no timed GEMV for {name!r} at {batch} rows")
        best = min(timed, key=lambda r: r["us"])
        out[name.split()[1].split("+")[0]] = _config_of(best)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.kernels")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gemv-sweep", action="store_true",
                   help="only sweep kernels/gemv.py's launch configurations at one model's shapes")
    p.add_argument("--batches", default="1", help="--gemv-sweep's batch sizes (rows), comma-separated")
    p.add_argument("--shapes", choices=sorted(SHAPES), default="cp", help="--gemv-sweep: whose products")
    args = p.parse_args(argv)
    if args.gemv_sweep:
        rows = [r for batch in args.batches.split(",") for r in gemv_sweep(int(batch), SHAPES[args.shapes])]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "gemv_sweep": rows}, indent=2))
        return 0
    from tts_engine.kernels import decode_attention as da
    from tts_engine.kernels.cp_attention import cp_attention, cp_attention_ref
    from tts_engine.kernels.gemv import gemv
    from tts_engine.kernels.qk_norm_rope import qk_norm_rope, qk_norm_rope_ref
    from tts_engine.kernels.rms_norm import add_rms_norm, add_rms_norm_ref, rms_norm, rms_norm_ref
    from tts_engine.kernels.silu_mul import silu_mul, silu_mul_ref

    h, inter, hq, hkv, d = 2048, 6144, 16, 8, 128  # talker
    rows = []

    def add(name, batch, ms, nbytes=None):
        row = {"op": name, "batch": batch, "us": round(ms * 1e3, 2)}
        if nbytes:
            row["floor_us"] = round(nbytes / 4.19e12 * 1e6, 2)  # copy bandwidth measured on this H200
        rows.append(row)
        print(f"{name:<34} b={batch:<3} {row['us']:8.2f} us" + (f"  (floor {row['floor_us']} us)" if nbytes else ""),
              flush=True)

    with torch.inference_mode():
        for b in (1, 8, 64):
            xs = [rnd(b, h) for _ in range(SETS)]
            ds = [rnd(b, h) for _ in range(SETS)]
            w = rnd(h)
            add("rms_norm torch", b, graph_ms([partial(rms_norm_ref, x, w, 1e-6) for x in xs]))
            add("rms_norm triton", b, graph_ms([partial(rms_norm, x, w, 1e-6) for x in xs]))
            add("add_rms_norm torch", b, graph_ms([partial(add_rms_norm_ref, x, y, w, 1e-6) for x, y in zip(xs, ds)]))
            add("add_rms_norm triton", b, graph_ms([partial(add_rms_norm, x, y, w, 1e-6) for x, y in zip(xs, ds)]))
            gus = [rnd(b, 2 * inter) for _ in range(SETS)]
            add("silu_mul torch", b, graph_ms([partial(silu_mul_ref, g) for g in gus]))
            add("silu_mul triton", b, graph_ms([partial(silu_mul, g) for g in gus]))

            slots = torch.arange(b, device="cuda")
            pos = torch.randint(0, 512, (b,), device="cuda")
            qk_args = (rnd(d), rnd(d), rnd(2048, d), rnd(2048, d), pos, slots, rnd(65, hkv, 512, d),
                       rnd(65, hkv, 512, d), 1e-6, hq, hkv)
            qkvs = [rnd(b, (hq + 2 * hkv) * d) for _ in range(SETS)]
            add("qk_norm_rope+store torch", b, graph_ms([partial(qk_norm_rope_ref, q, *qk_args) for q in qkvs]))
            add("qk_norm_rope+store triton", b, graph_ms([partial(qk_norm_rope, q, *qk_args) for q in qkvs]))

            for name, n_out, n_in in (("gemm qkv", (hq + 2 * hkv) * d, h), ("gemm o", h, hq * d),
                                      ("gemm gate_up", 2 * inter, h), ("gemm down", h, inter)):
                xin = rnd(b, n_in)
                add(name, b, graph_ms([partial(F.linear, xin, rnd(n_out, n_in)) for _ in range(SETS)]),
                    n_out * n_in * 2)

            for max_len, length in ((512, 448), (2048, 2000)):
                kv = (rnd(65, hkv, max_len, d), rnd(65, hkv, max_len, d))
                qs = [rnd(b, hq, d) for _ in range(SETS)]
                rest = (*kv, slots, torch.full((b,), length, device="cuda"))
                kv_bytes = b * hkv * length * d * 2 * 2
                add(f"decode_attn L{length} torch", b,
                    graph_ms([partial(da.decode_attention_ref, q, *rest) for q in qs]), kv_bytes)
                add(f"decode_attn L{length} v1", b, graph_ms([partial(_attention_v1, q, *rest) for q in qs]), kv_bytes)
                add(f"decode_attn L{length} v2", b, graph_ms([partial(da.decode_attention, q, *rest) for q in qs]),
                    kv_bytes)
                add(f"decode_attn L{length} v3", b,
                    graph_ms([partial(da.decode_attention, q, *rest, version=3) for q in qs]), kv_bytes)

            if b <= 16:  # the fused small-batch GEMV against cuBLAS (+ its separate epilogue kernel)
                for name, n_out, n_in in (("talker", 2 * inter, h), ("cp", 6144, 1024)):
                    xin, res = rnd(b, n_in), rnd(b, n_out // 2)
                    ws = [rnd(n_out, n_in) for _ in range(SETS)]
                    floor = n_out * n_in * 2
                    add(f"{name} gate_up+silu cublas", b, graph_ms([partial(lambda x, w: silu_mul(F.linear(x, w)),
                                                                           xin, w) for w in ws]), floor)
                    add(f"{name} gate_up+silu gemv", b, graph_ms([partial(gemv, xin, w, silu_mul=True) for w in ws]),
                        floor)
                    wd = [rnd(n_out // 2, n_in) for _ in range(SETS)]
                    add(f"{name} proj+residual cublas", b, graph_ms([partial(lambda x, w, r: r + F.linear(x, w),
                                                                            xin, w, res) for w in wd]), floor // 2)
                    add(f"{name} proj+residual gemv", b, graph_ms([partial(gemv, xin, w, residual=res) for w in wd]),
                        floor // 2)

            ckv = (rnd(64, hkv, 16, d), rnd(64, hkv, 16, d), 8)
            cqs = [rnd(b, 1, hq, d) for _ in range(SETS)]
            add("cp_attn start8 torch", b, graph_ms([partial(cp_attention_ref, q, *ckv) for q in cqs]))
            add("cp_attn start8 triton", b, graph_ms([partial(cp_attention, q, *ckv) for q in cqs]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
