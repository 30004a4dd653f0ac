"""The code predictor's launch tables: which kernel configuration each of its products (and its attention) runs with
on the fast path, by the path a pass takes (runtime/code_predictor.py reads them; a test or benchmark may set its own
there). Each table is the fastest of a sweep on the H200, timed as the whole frame.

    GEMV_LAUNCH             passes of up to `FastPathOptions.cp_gemv_rows` rows, without PDL
    PDL_LAUNCH, PDL_ROWS    the same passes with programmatic dependent launch (`cp_pdl`, the default on sm90)
    EARLY_TRIGGER_LAUNCHES  the launches of those that may let the next one start before their wait
    ROWS_EARLY_LAUNCHES     the same for the passes on the CUDA kernel's rows
    ATTENTION_O_LAUNCH      the attention + o launch in those passes (kernels/cp_attention_o.py)
    GEMV_KERNEL_ROWS        the passes past them on the CUDA kernel's rows (kernels/cp_gemv.py), under PDL
    attention_warps         the fused attention's warps by a pass's rows
"""

from __future__ import annotations

from ..kernels.gemv import LATE_SUM

# Passes of at most `FastPathOptions.cp_gemv_rows` token rows (2 by default) run their products through
# kernels/gemv.py with these launch configurations (1.7B shapes: qkv [4096, 1024], o [1024, 2048], gate/up
# [6144, 1024], down [1024, 3072], head [2048, 1024]), the best of a sweep on the H200 at 1 row. µs at
# 1 / 2 / 4 / 8 rows, cuBLAS + epilogue at 1 in brackets: qkv 3.7 / 4.4 / 6.1 / 9.4 (4.0), o + residual
# 3.0 / 3.2 / 3.9 / 5.2 (13.9), gate/up + SwiGLU 6.1 / 6.8 / 8.5 / 19.1 (7.4), down + residual
# 3.4 / 3.7 / 4.4 / 5.9 (7.7). cuBLAS takes ~4-8 µs whatever the rows, so past a few rows it wins (the
# code-predictor frame at batch 8: 13.8 ms with a 16-row table, 3.0 ms on cuBLAS).
GEMV_LAUNCH = {"qkv": dict(block_n=8, block_k=256, **LATE_SUM), "o": dict(block_n=4, block_k=512, **LATE_SUM),
               "gate_up": dict(block_n=8, block_k=256, **LATE_SUM), "down": dict(block_n=4, block_k=512, **LATE_SUM),
               "head": dict(block_n=8, block_k=256, **LATE_SUM)}

# With programmatic dependent launch (sm90+, `FastPathOptions.cp_pdl`, on by default there): passes
# of at most PDL_ROWS rows run every kernel with PDL and the GEMVs with whole rows of w per program,
# read before the wait for the previous kernel (kernels/gemv.py `_gemv_rows_kernel`): the weights of
# the next product stream in while the current one finishes, as a persistent kernel would overlap
# them (code-predictor frame 1.82 ms against 2.42); its GPU test (tests/gpu/test_code_predictor_gpu.py)
# gives the codes of the same kernels launched without PDL. The table: each product's candidates timed
# as the whole batch-1 frame, the others at their best.
# o and down read their residual before the wait too (`residual_early`: written two launches back or more,
# the draw's embedding or the previous layer's down for o, o's output for down).
PDL_ROWS = 2
# The passes past the GEMV ones of at most this many token rows take their products from the CUDA kernel's rows where
# it runs (`CodePredictorRunner.gemv_kernel_rows`), and with `rows_pdl` run under PDL: code-predictor frame at
# batch 8 / 16 / 32 2.472 / 2.557 / 2.633 ms on cuBLAS, 1.569 / 1.885 / 2.285 on the rows under PDL; passes of 64
# rows on them lose to cuBLAS.
GEMV_KERNEL_ROWS = 32
_PDL = dict(whole_rows=True, pdl=True)
PDL_LAUNCH = {"qkv": dict(block_n=4, num_warps=4, **_PDL),
              "o": dict(block_n=4, num_warps=4, residual_early=True, **_PDL),
              "gate_up": dict(block_n=4, num_warps=2, **_PDL),
              "down": dict(block_n=4, num_warps=4, residual_early=True, **_PDL),
              "head": dict(block_n=2, num_warps=8, **_PDL)}


# The PDL passes' launches that may let the next launch's programs start before their own wait (`backend.PDL_EARLY`;
# `CodePredictorRunner.early_trigger` names those that do). A launch may read before its wait only what was written
# before the last launch ahead of it that triggers after its wait; gate/up always does, so: qkv -> attention + o (w_o;
# cache positions of earlier passes, written before the last gate/up), attention + o -> gate/up (weights), down -> the
# next layer's qkv or the head (weights), head -> draw (settings, written at the step's start), a draw but the frame's
# last -> the next pass's attention + o. Not gate/up: down after it reads early the residual and o's sum, complete only
# once gate/up has passed its wait; not the frame's last draw: what follows the code predictor is not these launches.
EARLY_TRIGGER_LAUNCHES = ("qkv", "attention_o", "down", "head", "draw")

# The same for the rows passes (past the GEMV ones, their products the CUDA kernel's rows under PDL; `rows_early`
# names those that do). Before its wait a launch there reads only constants (weights, norm weights, the RoPE table)
# but the attention, which reads the cache positions of earlier passes: so every launch may trigger early but qkv,
# the launch ahead of every attention but the first layer's (with the qkv table, the draw's), and what the first layer's
# attention reads was written before the last qkv of the pass before it. Not the frame's last draw either: what follows
# the code predictor is not these launches.
ROWS_EARLY_LAUNCHES = ("attention", "norm", "o", "gate_up", "down", "head", "draw")


# The attention + o launch (`attention_o`, kernels/cp_attention_o.py) by the positions a row of the pass holds
# (1; 2 in a frame's prefill): output features a program, its warps (frame ms at batch 1 / 2: two launches
# 1.510 / 1.864; one launch 1.443 / 1.817 at 128 x 8; fewer features or warps are slower). At 2 positions
# 128 x 8 spills registers, 64 x 8 does not.
ATTENTION_O_LAUNCH = {1: dict(block_r=128, num_warps=8), 2: dict(block_r=64, num_warps=8)}


def attention_warps(rows: int, pdl: bool) -> int:
    """Warps a program of the fused attention (cp_qk_attention) for a pass of `rows` token rows: the
    fastest of 1 / 2 / 4 / 8 at batch 1 (PDL), 8, 32 and 64."""
    if pdl:
        return 8
    return 4 if rows <= 16 else 2
