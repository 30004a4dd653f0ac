"""Small-batch matrix-vector products with the ops that follow them fused in.

    gemv(x [M, K], w [N, K])                      -> x @ w.T                     [M, N]
    gemv(x, w, residual=r [M, N])                 -> r + x @ w.T                 [M, N]
    gemv(x, w_gate_up [2 I, K], silu_mul=True)    -> silu(x @ gate.T) * (x @ up.T)  [M, I]
    gemv(x, w, norm=(ln [K], eps), ...)           -> the same of rms_norm(x, ln, eps)

Why: at batch 1 the decode steps are GEMVs, and cuBLAS runs the code predictor's 4-12 MB matrices
with 64x8 tiles, 16-64 CTAs on a 132-SM card, ~5 µs each whatever the size:
latency-bound, far from bandwidth. Here one program owns BLOCK_N output features (rows of w) for
every batch row (M <= 16), streams its rows of w once in BLOCK_K slices with 16-byte loads, and
keeps the products in fp32 registers; N / BLOCK_N programs (e.g. 128 for N = 1024, BLOCK_N = 8)
put the whole matrix in flight at once. The residual add and SwiGLU, separate launches after a
cuBLAS product, happen in the epilogue (the gate and up rows of one feature live in one program);
the RMSNorm before a product, a launch of its own otherwise, in the prologue: every program
recomputes the M rows' sums of squares (x is a few KB, in L2) and normalises each slice as it loads it.

Rounding is the reference's: the product rounded to the output dtype, then the residual add
rounded again (`r + F.linear(x, w)`), or silu in fp32 rounded, times the rounded up projection,
rounded (`F.silu(g) * u`); the norm as `rms_norm_ref` rounds it. The fp32 sum runs in another order
than cuBLAS', so a few elements may differ by one ulp (tests/kernels/test_gemv.py).

Status: tested against its reference (interpreter on CPU, compiled on a GPU). On the H200, with one
reduction after the K loop and 3 pipelined slices: 16.1 µs for the code predictor's four products at
batch 1 against cuBLAS + epilogues 33.1; its cost grows with the rows it holds, so the code predictor
uses it for passes of 1-2 rows only (runtime/code_predictor.py), and the talker for its steps at batch 1
(35.9 against 44.0 µs a layer; runtime/runner.py). The whole-row variant serves programmatic dependent
launch (`pdl`, the code predictor's 1-2 row passes on sm90+). Its row-streaming form (`row_blocks`: a
program's row blocks in turn, the next one's weights loading while the last one's are summed) serves the
talker's batch-1 qkv, gate/up and down (step 1.080 -> 0.941 ms); its sliced rows (`row_chunks`, which the
streaming form's helpers share) tie or lose in the sweeps: no launch table uses them. Both are in
kernels/gemv_rows.py, the epilogue every kernel shares in kernels/gemv_epilogue.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .backend import HAVE_TRITON, from_fixed_ref, next_pow2, pdl_launch
from .rms_norm import rms_norm_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to
    from .gemv_epilogue import delta_x, epilogue, residual_of
    from .gemv_rows import _gemv_row_slices_kernel, _gemv_row_stream_kernel

MAX_ROWS = 16  # batch rows one program holds in registers (the CUDA-core kernels)
# What every launch configuration the sweeps chose at 1 row shares (the code predictor's and the
# talker's shapes): one reduction after the K loop, 3 pipelined slices, 4 warps.
LATE_SUM = dict(late_sum=True, stages=3, num_warps=4)


def gemv_ref(x: torch.Tensor, w: torch.Tensor, *, residual: torch.Tensor | None = None,
             silu_mul: bool = False, norm: tuple[torch.Tensor, float] | None = None,
             x_delta: torch.Tensor | None = None, residual_delta: torch.Tensor | None = None) -> torch.Tensor:
    m = x.shape[0]
    if x_delta is not None:
        x = x + from_fixed_ref(x_delta[:m], x.dtype)
    if residual_delta is not None:
        residual = residual + from_fixed_ref(residual_delta[:m], residual.dtype)
        residual_delta[:m].zero_()
    if norm is not None:
        x = rms_norm_ref(x, *norm)
    y = F.linear(x, w)
    if silu_mul:
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    return y if residual is None else residual + y


if HAVE_TRITON:

    @triton.jit
    def _gemv_kernel(x_ptr, w_ptr, r_ptr, ln_ptr, y_ptr, m, n_out, k, s_x, s_w, s_r, s_y, eps, d_ptr, s_d,
                     DELTA: tl.constexpr, MODE: tl.constexpr, NORM: tl.constexpr, M_P: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, LATE_SUM: tl.constexpr, STAGES: tl.constexpr,
                     PDL: tl.constexpr):
        """MODE 0: plain, 1: + residual, 2: SwiGLU over rows n (gate) and n + n_out (up) of w.
        LATE_SUM: keep the products [M_P, BLOCK_N, BLOCK_K] in registers and reduce over K once
        after the loop (one cross-thread reduction instead of one per slice; registers grow with
        M_P); STAGES: software-pipelined slices of w in flight per program. NORM: x is RMS-normalised
        with weight ln_ptr [K] first. PDL: launched with programmatic dependent launch, the program
        waits for the previous kernel before its first load (its launch and scheduling overlap that
        kernel's tail; `_gemv_rows_kernel` also streams its weights in meanwhile). DELTA (`delta_x`,
        `residual_of`): x or the residual is the sum of it and d_ptr's fixed-point values."""
        pdl_start(PDL)
        x_dt = x_ptr.dtype.element_ty
        feats = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        rows = tl.arange(0, M_P)
        f_ok, r_ok = feats < n_out, rows < m
        acc = tl.zeros((M_P, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((M_P, BLOCK_N), dtype=tl.float32)
        part = tl.zeros((M_P, BLOCK_N, BLOCK_K), dtype=tl.float32)
        part_up = tl.zeros((M_P, BLOCK_N, BLOCK_K), dtype=tl.float32)
        inv_rms = tl.zeros((M_P,), dtype=tl.float32)
        if NORM:
            sum_sq = tl.zeros((M_P,), dtype=tl.float32)
            for k0 in range(0, k, BLOCK_K):
                ks = k0 + tl.arange(0, BLOCK_K)
                xs = delta_x(x_ptr, d_ptr, rows, ks, r_ok, ks < k, s_x, s_d, DELTA)
                sum_sq += tl.sum(xs * xs, axis=1)
            inv_rms = tl.rsqrt(sum_sq / k + eps)
        for k0 in tl.range(0, k, BLOCK_K, num_stages=STAGES):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < k
            xs = delta_x(x_ptr, d_ptr, rows, ks, r_ok, k_ok, s_x, s_d, DELTA)  # [M_P, BLOCK_K]
            if NORM:
                ln = tl.load(ln_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)
                xs = round_to(ln[None, :] * round_to(xs * inv_rms[:, None], x_dt), x_dt)
            w_at = w_ptr + feats[:, None].to(tl.int64) * s_w + ks[None, :]
            w_ok = f_ok[:, None] & k_ok[None, :]
            ws = tl.load(w_at, mask=w_ok, other=0.0).to(tl.float32)  # [BLOCK_N, BLOCK_K]
            if LATE_SUM:
                part += xs[:, None, :] * ws[None, :, :]
            else:
                acc += tl.sum(xs[:, None, :] * ws[None, :, :], axis=2)
            if MODE == 2:
                wu = tl.load(w_at + n_out * s_w, mask=w_ok, other=0.0).to(tl.float32)
                if LATE_SUM:
                    part_up += xs[:, None, :] * wu[None, :, :]
                else:
                    acc_up += tl.sum(xs[:, None, :] * wu[None, :, :], axis=2)
        if LATE_SUM:
            acc = tl.sum(part, axis=2)
            acc_up = tl.sum(part_up, axis=2)
        epilogue(acc, acc_up, r_ptr, y_ptr, rows, feats, r_ok, f_ok, s_r, s_y, MODE, acc, False, d_ptr, s_d, DELTA)

    @triton.jit
    def _gemv_rows_kernel(x_ptr, w_ptr, r_ptr, ln_ptr, y_ptr, m, n_out, k, s_x, s_w, s_r, s_y, eps, d_ptr, s_d,
                          DELTA: tl.constexpr, MODE: tl.constexpr, NORM: tl.constexpr, M_P: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr, RES_EARLY: tl.constexpr):
        """`_gemv_kernel` with whole rows of w (BLOCK_K >= K) per program, loaded before anything the
        previous kernel writes is read: launched with PDL, this program's weights stream in while the
        previous kernel finishes, and `gdc_wait` then makes that kernel's outputs (x, residual)
        visible. `gdc_launch_dependents` lets the next kernel do the same. RES_EARLY: the residual is
        read before the wait too, right where it was written two launches back or more (then the
        previous kernel's own wait has seen that launch finish)."""
        feats = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        rows = tl.arange(0, M_P)
        ks = tl.arange(0, BLOCK_K)
        f_ok, r_ok, k_ok = feats < n_out, rows < m, ks < k
        w_at = w_ptr + feats[:, None].to(tl.int64) * s_w + ks[None, :]
        w_ok = f_ok[:, None] & k_ok[None, :]
        ws = tl.load(w_at, mask=w_ok, other=0.0)  # [BLOCK_N, BLOCK_K]: constants, safe
        wu = ws  # before the wait
        if MODE == 2:
            wu = tl.load(w_at + n_out * s_w, mask=w_ok, other=0.0)
        ln = tl.zeros((BLOCK_K,), dtype=tl.float32)
        if NORM:
            ln = tl.load(ln_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)
        ok = r_ok[:, None] & f_ok[None, :]
        res = tl.zeros((M_P, BLOCK_N), dtype=tl.float32)
        if RES_EARLY:
            res = residual_of(r_ptr, d_ptr, rows, feats, ok, s_r, s_d, DELTA)
        pdl_start(PDL)
        x_dt = x_ptr.dtype.element_ty
        xs = delta_x(x_ptr, d_ptr, rows, ks, r_ok, k_ok, s_x, s_d, DELTA)  # [M_P, BLOCK_K]
        if NORM:
            inv_rms = tl.rsqrt(tl.sum(xs * xs, axis=1) / k + eps)
            xs = round_to(ln[None, :] * round_to(xs * inv_rms[:, None], x_dt), x_dt)
        acc = tl.sum(xs[:, None, :] * ws.to(tl.float32)[None, :, :], axis=2)
        acc_up = acc
        if MODE == 2:
            acc_up = tl.sum(xs[:, None, :] * wu.to(tl.float32)[None, :, :], axis=2)
        epilogue(acc, acc_up, r_ptr, y_ptr, rows, feats, r_ok, f_ok, s_r, s_y, MODE, res, RES_EARLY, d_ptr, s_d,
                  DELTA)


def gemv(x: torch.Tensor, w: torch.Tensor, *, residual: torch.Tensor | None = None, silu_mul: bool = False,
         norm: tuple[torch.Tensor, float] | None = None, block_n: int = 8, block_k: int = 256, num_warps: int = 4,
         late_sum: bool = False, stages: int = 1, whole_rows: bool = False, pdl: bool = False,
         residual_early: bool = False, row_chunks: int = 1, row_blocks: int = 1,
         x_delta: torch.Tensor | None = None, residual_delta: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS; last dim contiguous), w [N, K] contiguous
    -> [M, N] (or [M, N / 2] with silu_mul), in x's dtype; norm=(ln [K], eps) normalises x first.
    block_n, block_k, num_warps, late_sum, stages: the launch configuration (`bench/kernels.py` sweeps
    them against cuBLAS on the GPU). whole_rows: each program holds whole rows of w (block_k is K
    rounded up; for a few rows of x); pdl: launched with programmatic dependent launch
    (`backend.pdl_supported`; with whole_rows the weights load before the wait for the previous
    kernel). residual_early (whole_rows): the residual is read before that
    wait too, which with pdl is right only where it was written two launches back or more (the decoder layers' o and
    down products);
    row_chunks (whole_rows, 1-3): a row held as that many power-of-two slices of K / row_chunks rounded up
    (K 6,144 as 3 x 2,048, not one 8,192-wide slice with a quarter masked);
    row_blocks (whole_rows, any slices): blocks of block_n rows one program streams in turn, the next block's
    weights loading while the last one's products are summed (a grid of cdiv(N, block_n * row_blocks) programs).
    x_delta [>= M, K] int64 (the whole-row and the K-loop kernels): x is x + x_delta's multiples of 2^-32, rounded to
    x's dtype and added as the reference adds a product to its residual (kernels/cp_attention_o.py's o_sum);
    residual_delta [>= M, N] int64 (the same kernels, with residual): the residual is residual + residual_delta so,
    and residual_delta is zeroed once read (the product that reads it last: the next sum into it starts at 0)."""
    if not HAVE_TRITON:
        return gemv_ref(x, w, residual=residual, silu_mul=silu_mul, norm=norm, x_delta=x_delta,
                        residual_delta=residual_delta)
    m, k = x.shape
    if m > MAX_ROWS:
        raise ValueError(f"gemv holds at most {MAX_ROWS} rows, got {m}")
    if w.shape[1] != k or w.stride(1) != 1 or x.stride(1) != 1:
        raise ValueError(f"gemv needs x [M, K] and w [N, K] with K contiguous, got {tuple(x.shape)}, {tuple(w.shape)}")
    if x.dtype != w.dtype:
        raise ValueError(f"gemv needs one dtype, got x {x.dtype}, w {w.dtype}")
    if residual is not None and silu_mul:
        raise ValueError("gemv: residual and silu_mul do not combine")
    if row_chunks not in (1, 2, 3) or (row_chunks > 1 and not whole_rows):
        raise ValueError(f"gemv: row_chunks is 1, 2 or 3, and more than 1 only with whole_rows, got {row_chunks}")
    if not 1 <= row_blocks <= 64 or (row_blocks > 1 and not whole_rows):
        raise ValueError(f"gemv: row_blocks is 1-64, and more than 1 only with whole_rows, got {row_blocks}")
    if residual_early and not (whole_rows and residual is not None):
        raise ValueError("gemv: residual_early is the whole-row kernels' early read of a residual")
    n_out = w.shape[0] // 2 if silu_mul else w.shape[0]
    y = torch.empty(m, n_out, device=x.device, dtype=x.dtype)
    r = residual if residual is not None else y
    if residual is not None and (residual.shape != y.shape or residual.stride(1) != 1):
        raise ValueError(f"residual must be [M, N] = {tuple(y.shape)} with N contiguous")
    ln, eps = norm if norm is not None else (x, 0.0)
    if norm is not None and (ln.shape != (k,) or ln.dtype != x.dtype or ln.stride(0) != 1):
        raise ValueError(f"norm weight must be [K] = [{k}] contiguous in x's dtype, got {tuple(ln.shape)} {ln.dtype}")
    mode = 2 if silu_mul else 1 if residual is not None else 0
    delta = _delta_args(x_delta, residual_delta, m, k, n_out, mode, row_chunks > 1 or row_blocks > 1, y)
    args = (x, w, r, ln, y, m, n_out, k, x.stride(0), w.stride(0), r.stride(0), y.stride(0), eps)
    shape = dict(MODE=mode, NORM=norm is not None, M_P=max(1, next_pow2(m)), BLOCK_N=block_n)
    grid = (triton.cdiv(n_out, block_n),)
    if whole_rows:
        launch = dict(**shape, BLOCK_K=next_pow2(-(-k // row_chunks)), PDL=pdl, RES_EARLY=residual_early,
                      num_warps=num_warps, **pdl_launch(pdl))
        if row_blocks > 1:
            grid = (triton.cdiv(grid[0], row_blocks),)
            _gemv_row_stream_kernel[grid](*args, **launch, CHUNKS=row_chunks, BLOCKS=row_blocks)
        elif row_chunks == 1:
            _gemv_rows_kernel[grid](*args, **delta, **launch)
        else:
            _gemv_row_slices_kernel[grid](*args, **launch, CHUNKS=row_chunks)
    else:
        _gemv_kernel[grid](*args, **delta, **shape, BLOCK_K=block_k, LATE_SUM=late_sum, STAGES=stages, PDL=pdl,
                           num_warps=num_warps, **pdl_launch(pdl))
    return y


def _delta_args(x_delta, residual_delta, m: int, k: int, n_out: int, mode: int, other_kernel: bool, y) -> dict:
    """The kernels' d_ptr, s_d, DELTA for gemv's x_delta / residual_delta (checked)."""
    if x_delta is not None and residual_delta is not None:
        raise ValueError("gemv: x_delta and residual_delta do not combine")
    d, width, kind = (x_delta, k, 1) if x_delta is not None else (residual_delta, n_out, 2)
    if d is None:
        return dict(d_ptr=y, s_d=0, DELTA=0)
    if other_kernel:
        raise ValueError("gemv: x_delta / residual_delta are the whole-row and K-loop kernels' (no row_chunks or "
                         "row_blocks)")
    if kind == 2 and mode != 1:
        raise ValueError("gemv: residual_delta needs a residual")
    if d.dtype != torch.int64 or d.dim() != 2 or d.shape[0] < m or d.shape[1] != width or d.stride(1) != 1:
        raise ValueError(f"gemv: {'x' if kind == 1 else 'residual'}_delta must be int64 [>= {m}, {width}] with unit "
                         f"column stride, got {d.dtype} {tuple(d.shape)}")
    return dict(d_ptr=d, s_d=d.stride(0), DELTA=kind)
