"""The tensor-core GEMV (kernels/gemv.py dispatches `gemv(mma=True)` here): the K loop of [BLOCK_M, BLOCK_K] x
[BLOCK_K, BLOCK_N] `tl.dot`s over rows padded to BLOCK_M >= 16, with the GEMVs' fusions (the RMSNorm in the prologue,
the residual add or SwiGLU in the epilogue, kernels/gemv_epilogue.py) for 3-64 rows: the talker's short prefills
(talker_launch.PREFILL_MMA_LAUNCH) and the code predictor's passes past its GEMV ones (cp_launch.MMA_LAUNCH).

With programmatic dependent launch (`PDL`) the launch and the read of the residual, where it was written two launches
back or more (`RES_EARLY`), come before the wait for the previous kernel. Its weights do not: the CUDA-core whole-row
kernel holds its rows in registers from before the wait, but in the tensor cores' operand layouts 16 rows of K
1,024-3,072 spill at 16-64 rows of x (compiled for sm90 offline in run 24: 255 registers and 0.6-19 KB of stack a
thread). An L2 prefetch of the program's rows before the wait (inline `prefetch.global.L2`) measured within noise
(run 24 call 1: frame 3.12 / 3.97 ms at batch 8 / 32 with it, 3.15 / 4.02 without) and was left out.

Why: cuBLAS runs the code predictor's batch-8-32 products at ~1.4 TB/s with a launch (and at down a split-K
reduce) of its own each, its norms and SwiGLU launches beside them: run 23's batch-32 profile, 634 µs of a 2.96 ms
frame in 301 launches besides the products. It lost to cuBLAS at every batch (run 24: cp_launch.MMA_LAUNCH has
the figures), so the code predictor runs it only where asked (`FastPathOptions.cp_mma_rows`).
"""

from __future__ import annotations

from .backend import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to
    from .gemv_epilogue import epilogue

    @triton.jit
    def _gemm_mma_kernel(x_ptr, w_ptr, r_ptr, ln_ptr, y_ptr, m, n_out, k, s_x, s_w, s_r, s_y, eps,
                         MODE: tl.constexpr, NORM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, STAGES: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr,
                         RES_EARLY: tl.constexpr):
        """MODE 0: plain, 1: + residual, 2: SwiGLU over rows n (gate) and n + n_out (up) of w (as gemv.py's
        kernels); each x slice normalised and rounded to x's dtype first, as the reference feeds its product.
        IEEE: the operands widened to fp32 and multiplied exactly: for fp32 inputs (TF32 would round them) and in
        the CPU interpreter, whose dot does not take bf16 (its products of bf16 values are exact in fp32, as the
        tensor cores' are). PDL, RES_EARLY: see the module."""
        feats = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        rows = tl.arange(0, BLOCK_M)
        f_ok, r_ok = feats < n_out, rows < m
        x_dt = x_ptr.dtype.element_ty
        res = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if RES_EARLY:
            res = tl.load(r_ptr + rows[:, None] * s_r + feats[None, :], mask=r_ok[:, None] & f_ok[None, :],
                          other=0.0).to(tl.float32)
        pdl_start(PDL)
        inv_rms = tl.zeros((BLOCK_M,), dtype=tl.float32)
        if NORM:  # pipelined like the main loop: a plain loop waits a global-load latency per slice
            sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
            for k0 in tl.range(0, k, BLOCK_K, num_stages=STAGES):
                ks = k0 + tl.arange(0, BLOCK_K)
                xs = tl.load(x_ptr + rows[:, None] * s_x + ks[None, :], mask=r_ok[:, None] & (ks < k)[None, :],
                             other=0.0).to(tl.float32)
                sum_sq += tl.sum(xs * xs, axis=1)
            inv_rms = tl.rsqrt(sum_sq / k + eps)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in tl.range(0, k, BLOCK_K, num_stages=STAGES):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < k
            xs = tl.load(x_ptr + rows[:, None] * s_x + ks[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0)
            if NORM:
                ln = tl.load(ln_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)
                xs = round_to(ln[None, :] * round_to(xs.to(tl.float32) * inv_rms[:, None], x_dt), x_dt).to(x_dt)
            w_at = w_ptr + feats[:, None].to(tl.int64) * s_w + ks[None, :]
            w_ok = f_ok[:, None] & k_ok[None, :]
            ws = tl.load(w_at, mask=w_ok, other=0.0)  # [BLOCK_N, BLOCK_K]
            if IEEE:
                acc = tl.dot(xs.to(tl.float32), tl.trans(ws.to(tl.float32)), acc, input_precision="ieee")
            else:
                acc = tl.dot(xs, tl.trans(ws), acc)
            if MODE == 2:
                wu = tl.load(w_at + n_out * s_w, mask=w_ok, other=0.0)
                if IEEE:
                    acc_up = tl.dot(xs.to(tl.float32), tl.trans(wu.to(tl.float32)), acc_up, input_precision="ieee")
                else:
                    acc_up = tl.dot(xs, tl.trans(wu), acc_up)
        epilogue(acc, acc_up, r_ptr, y_ptr, rows, feats, r_ok, f_ok, s_r, s_y, MODE, res, RES_EARLY, y_ptr, 0, 0)
