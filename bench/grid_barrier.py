"""Would a persistent kernel pay at batch 1? The question behind issue 3's code-predictor target
(docs/perf-notes.md, "Issue 3's kernels"): a frame is a chain of ~375 dependent products, each now a
launch of its own (PDL, weights read before the wait). A persistent kernel would replace each launch
boundary with a grid-wide barrier; whether that is cheaper is measured here, before any model kernel
is written that way.

The chain: y_{r+1} = scale * W_{r mod n} y_r, square bf16 W of side d (n of them, more bytes than L2
holds), fp32 y, each round's programs splitting W's rows, so every round needs all of the previous
one's outputs, as a layer's products do. Timed as CUDA graphs on one GPU, µs a round:

  launch         one launch a round (weights read after the launch starts)
  launch_pdl     one launch a round with programmatic dependent launch, weights read before the wait
                 (the engine's code-predictor GEMVs at batch 1)
  persistent     one launch for every round, a grid-wide barrier between rounds (a spin on a global
                 counter), weights read after it
  persistent_early  the same with each round's weights read before its barrier
  barrier        the persistent kernel without weights: the barrier alone (every thread polls with
                 volatile loads)
  barrier_atomic the same, one thread polling with acquire loads (Triton lowers an acquire atomic add
                 of 0 so), the others waiting at a CTA barrier

beside the round's weight-read floor at the copy bandwidth measured in the same run. A persistent
launch uses at most one program per SM, so that all of them are resident (the barrier waits for
every one). Correctness: every variant's final y against the torch chain, and the barrier's counter.

    python -m bench.grid_barrier --out bench/results/grid-barrier-h200-<commit>.json
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

from tts_engine.kernels.backend import HAVE_TRITON, next_pow2, pdl_launch, pdl_supported

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from tts_engine.kernels.backend import pdl_start

    @triton.jit
    def _grid_barrier(counter_ptr, target, POLL_ATOMIC: tl.constexpr):
        """Arrive, then wait until `target` arrivals (all programs, this many times) have been counted.
        The CTA barrier first orders every thread's stores before the release. The wait polls with
        volatile loads from every thread (POLL_ATOMIC: acquire loads from one thread, between CTA
        barriers: Triton lowers an acquire atomic add of 0 to that), then takes one acquire and a CTA
        barrier, which order the program's later loads after the other programs' stores (as a
        cooperative grid sync does). The acquire's result feeds a loop condition: an atomic add of 0
        whose result is unused is dropped by the compiler (seen in the sm90 PTX)."""
        tl.debug_barrier()
        tl.atomic_add(counter_ptr, 1, sem="release", scope="gpu")
        if not POLL_ATOMIC:
            seen = tl.load(counter_ptr, volatile=True)
            while seen < target:
                seen = tl.load(counter_ptr, volatile=True)
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        while seen < target:
            seen = tl.atomic_add(counter_ptr, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()

    @triton.jit
    def _chain_kernel(w_ptr, y_ptr, counter_ptr, first_round, rounds, n_mats, d, scale,
                      D_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WEIGHTS: tl.constexpr,
                      EARLY: tl.constexpr, BARRIER: tl.constexpr, PDL: tl.constexpr, POLL_ATOMIC: tl.constexpr):
        """Rounds first_round .. first_round + rounds - 1: y [total rounds + 1, d] fp32, round r reads
        row r and writes row r + 1, this program's BLOCK_N features of it. EARLY: the round's weights
        (whole rows, D_P >= d) load before the barrier (BARRIER) or PDL wait (PDL) that makes row r
        visible; otherwise after it, BLOCK_K columns at a time. WEIGHTS False: y_{r+1}[f] =
        y_r[(f + BLOCK_N) mod d] + 1, another program's features, so that a barrier that opens early
        shows."""
        feats = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        f_ok = feats < d
        nprog = tl.num_programs(0)
        for i in range(rounds):
            r = first_round + i
            w_at = w_ptr + (r % n_mats).to(tl.int64) * d * d + feats[:, None].to(tl.int64) * d
            x_at = y_ptr + r * d
            if WEIGHTS and EARLY:
                ks = tl.arange(0, D_P)
                k_ok = ks < d
                w = tl.load(w_at + ks[None, :], mask=f_ok[:, None] & k_ok[None, :], other=0.0)
                if BARRIER:  # noqa: SIM102 (a compile-time branch around a run-time one)
                    if i > 0:
                        _grid_barrier(counter_ptr, i * nprog, POLL_ATOMIC)
                pdl_start(PDL)
                x = tl.load(x_at + ks, mask=k_ok, other=0.0, cache_modifier=".cg")
                acc = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
            else:
                if BARRIER:  # noqa: SIM102 (a compile-time branch around a run-time one)
                    if i > 0:
                        _grid_barrier(counter_ptr, i * nprog, POLL_ATOMIC)
                pdl_start(PDL)
                acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
                if WEIGHTS:
                    for k0 in range(0, d, BLOCK_K):
                        ks = k0 + tl.arange(0, BLOCK_K)
                        k_ok = ks < d
                        w = tl.load(w_at + ks[None, :], mask=f_ok[:, None] & k_ok[None, :], other=0.0)
                        x = tl.load(x_at + ks, mask=k_ok, other=0.0, cache_modifier=".cg")
                        acc += tl.sum(w.to(tl.float32) * x[None, :], axis=1)
                else:
                    acc = tl.load(x_at + (feats + BLOCK_N) % d, mask=f_ok, other=0.0, cache_modifier=".cg") + 1.0
            if WEIGHTS:
                acc = acc * scale
            tl.store(y_ptr + (r + 1) * d + feats, acc, mask=f_ok)

VARIANTS = ("launch", "launch_pdl", "persistent", "persistent_early", "barrier", "barrier_atomic")


def block_n_for(d: int, programs: int) -> int:
    """Features a program: the smallest power of two that needs at most `programs` programs."""
    return next_pow2(math.ceil(d / programs))


def run_chain(variant: str, w: torch.Tensor, y: torch.Tensor, counter: torch.Tensor, rounds: int,
              programs: int, scale: float, block_k: int = 256, num_warps: int = 4) -> None:
    """Launch `rounds` rounds of the chain from y[0] into y[1 .. rounds] (launch* variants: one launch
    a round; persistent ones: one launch, `counter` zeroed first). programs: the most programs a
    launch may have (a persistent launch needs them all resident: at most one per SM)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    n_mats, d = w.shape[0], w.shape[1]
    block_n = block_n_for(d, programs)
    grid = (math.ceil(d / block_n),)
    common = dict(D_P=next_pow2(d), BLOCK_N=block_n, BLOCK_K=min(block_k, next_pow2(d)), num_warps=num_warps)
    if variant.startswith("launch"):
        pdl = variant == "launch_pdl"
        for r in range(rounds):
            _chain_kernel[grid](w, y, counter, r, 1, n_mats, d, scale, WEIGHTS=True, EARLY=pdl, BARRIER=False,
                                PDL=pdl, POLL_ATOMIC=False, **common, **pdl_launch(pdl))
        return
    counter.zero_()
    _chain_kernel[grid](w, y, counter, 0, rounds, n_mats, d, scale, WEIGHTS=not variant.startswith("barrier"),
                        EARLY=variant == "persistent_early", BARRIER=True, PDL=False,
                        POLL_ATOMIC=variant == "barrier_atomic", **common)


def chain_ref(variant: str, w: torch.Tensor, y0: torch.Tensor, rounds: int, scale: float,
              block_n: int) -> torch.Tensor:
    """The chain's last row in fp32 torch (block_n: the launch's features a program, which the
    weightless variants shift by)."""
    y = y0.float()
    for r in range(rounds):
        if variant.startswith("barrier"):
            y = torch.roll(y, -(block_n % y.shape[0])) + 1.0
        else:
            y = scale * (w[r % w.shape[0]].float() @ y)
    return y


def _graph_us(fn, replays: int = 20) -> float:
    """Median µs of one replay of a graph that calls fn once."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def copy_tbs() -> float:
    """Device-to-device copy bandwidth (bytes read + written), TB/s."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = _graph_us(lambda: dst.copy_(src), replays=10)
    return 2 * src.numel() / (us * 1e-6) / 1e12


def measure(sides: list[int], rounds: int, l2_bytes: int = 120 << 20) -> dict:
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    bandwidth = copy_tbs()
    out = {"gpu": props.name, "sms": sms, "torch": torch.__version__, "triton": triton.__version__,
           "copy_bandwidth_tbs": bandwidth, "rounds": rounds, "sides": {}}
    for d in sides:
        n_mats = max(2, math.ceil(l2_bytes / (2 * d * d)))
        g = torch.Generator(device="cuda").manual_seed(d)
        w = torch.randn(n_mats, d, d, device="cuda", generator=g).bfloat16()
        y = torch.zeros(rounds + 1, d, device="cuda")
        y[0] = torch.randn(d, device="cuda", generator=g)
        counter = torch.zeros(1, dtype=torch.int32, device="cuda")
        scale = 1.0 / math.sqrt(d)
        block_n = block_n_for(d, sms)
        row = {"weights_mb_per_round": 2 * d * d / 1e6, "matrices": n_mats, "block_n": block_n,
               "programs": math.ceil(d / block_n),
               "floor_us_per_round": 2 * d * d / (bandwidth * 1e12) * 1e6}  # as docs/benchmarks.md's floors
        for variant in VARIANTS:
            if variant == "launch_pdl" and not pdl_supported(w.device):
                continue
            warps = 8 if variant == "persistent_early" and d >= 2048 else 4
            run = partial(run_chain, variant, w, y, counter, rounds, sms, scale, num_warps=warps)
            y[1:] = 0
            run()
            torch.cuda.synchronize()
            ref = chain_ref(variant, w, y[0], rounds, scale, block_n)
            err = ((y[rounds] - ref).norm() / ref.norm()).item()
            arrivals = int(counter.item()) if variant.startswith(("persistent", "barrier")) else None
            row[variant] = {"us_per_round": _graph_us(run) / rounds, "rel_err": err, "arrivals": arrivals,
                            "arrivals_expected": (rounds - 1) * row["programs"] if arrivals is not None else None}
        out["sides"][str(d)] = row
        del w
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.grid_barrier", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sides", default="1024,2048", help="square sides d of the chain's matrices, comma-separated")
    p.add_argument("--rounds", type=int, default=60)
    a = p.parse_args(argv)
    if not torch.cuda.is_available() or not HAVE_TRITON:
        print("bench.grid_barrier needs a CUDA GPU and Triton", file=sys.stderr)
        return 2
    result = measure([int(s) for s in a.sides.split(",")], a.rounds)
    a.out.write_text(json.dumps(result, indent=1))
    for d, row in result["sides"].items():
        cells = ", ".join(f"{v} {row[v]['us_per_round']:.2f} (err {row[v]['rel_err']:.1e})"
                          for v in VARIANTS if v in row)
        print(f"grid barrier d={d} ({row['programs']} programs, floor {row['floor_us_per_round']:.2f}): "
              f"µs a round: {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
