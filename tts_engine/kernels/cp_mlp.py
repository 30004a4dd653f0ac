"""The code predictor's SwiGLU MLP in one launch, its down product summed across programs in int64 fixed point.

    x         [M, H]          the residual stream before the MLP's norm
    x_delta   [>= M, H] int64 o's product (kernels/cp_attention_o.py): the MLP's input is x + x_delta rounded, as
                              gemv's x_delta adds it
    ln        [H]             the post-attention norm's weight
    w_gate_up [2 I, H]        gate rows, then up rows (runtime/fused.py's layout)
    w_down_t  [I, H]          the down projection's weight transposed (made at load: a program reads whole rows)
    out_sum   [>= M, H] int64 zero on entry; += down(silu(gate) * up) in 2^-32 units (`backend.FIXED_ONE`)

Why: in a batch-1 code-predictor pass gate/up and down are two launches of ~4 µs of critical path each (run 23's
profile), most of it the PDL boundary and the chain after the wait (the input, its norm, the products' sums, the
store), and down's input is the whole of gate/up's output. Split along the intermediate features instead, the two
need no boundary: a program holds BLOCK_I features' gate, up and down weights (loaded before the wait), makes
their activations from the whole input, and multiplies them by its BLOCK_I rows of down's transpose, a partial
down product over all H outputs, added into out_sum as integers (order-free, as cp_attention_o's sum). What is
paid: every program adds H values (I / BLOCK_I programs: 393 K int64 atomics a layer at BLOCK_I 8), and out_sum is
read by the products after it (gemv's x_delta, two deltas) rather than being a residual already added.
The activations are rounded as gemv's SwiGLU epilogue rounds them (the reference's `F.silu(g) * u` in the model's
dtype), so the sum is the reference's `F.linear(act, w_down)` up to fp32 summation order and the fixed point's
2^-32 a partial.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .backend import FIXED_ONE, HAVE_TRITON, from_fixed_ref, next_pow2, pdl_launch
from .rms_norm import rms_norm_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import from_fixed, pdl_start, round_to, to_fixed

MAX_ROWS = 4  # token rows a program holds (the code predictor's GEMV passes: 1-2 with PDL, up to 4 without)


def cp_mlp_ref(x, x_delta, ln, eps: float, w_gate_up, w_down_t, out_sum) -> None:
    """The kernel's result in torch: the activations as the reference rounds them, the down product in fp64, added
    to out_sum in 2^-32 units."""
    m = x.shape[0]
    h = rms_norm_ref(x + from_fixed_ref(x_delta[:m], x.dtype), ln, eps)
    gate, up = F.linear(h, w_gate_up).chunk(2, dim=-1)
    act = F.silu(gate) * up
    out_sum[:m] += torch.trunc(act.double() @ w_down_t.double() * FIXED_ONE).to(torch.int64)


if HAVE_TRITON:

    @triton.jit
    def _cp_mlp_kernel(x_ptr, d_ptr, ln_ptr, wgu_ptr, wd_ptr, sum_ptr, m, n_inter, h, eps, s_x, s_d, s_sum,
                       M_P: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_H: tl.constexpr, PDL: tl.constexpr):
        feats = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
        cols = tl.arange(0, BLOCK_H)
        rows = tl.arange(0, M_P)
        f_ok, c_ok, r_ok = feats < n_inter, cols < h, rows < m
        w_ok = f_ok[:, None] & c_ok[None, :]
        at = feats[:, None].to(tl.int64) * h + cols[None, :]
        # constants: every weight this program reads, before the wait
        gate = tl.load(wgu_ptr + at, mask=w_ok, other=0.0)  # [BLOCK_I, BLOCK_H]
        up = tl.load(wgu_ptr + n_inter * h + at, mask=w_ok, other=0.0)
        down = tl.load(wd_ptr + at, mask=w_ok, other=0.0)  # rows feats of down's transpose
        ln = tl.load(ln_ptr + cols, mask=c_ok, other=0.0).to(tl.float32)
        pdl_start(PDL)
        dt = x_ptr.dtype.element_ty
        ok = r_ok[:, None] & c_ok[None, :]
        xs = tl.load(x_ptr + rows[:, None] * s_x + cols[None, :], mask=ok, other=0.0).to(tl.float32)
        ds = tl.load(d_ptr + rows[:, None] * s_d + cols[None, :], mask=ok, other=0)
        xs = round_to(xs + from_fixed(ds, dt), dt)  # [M_P, BLOCK_H]
        inv_rms = tl.rsqrt(tl.sum(xs * xs, axis=1) / h + eps)
        xs = round_to(ln[None, :] * round_to(xs * inv_rms[:, None], dt), dt)
        g = round_to(tl.sum(xs[:, None, :] * gate.to(tl.float32)[None, :, :], axis=2), dt)  # [M_P, BLOCK_I]
        u = round_to(tl.sum(xs[:, None, :] * up.to(tl.float32)[None, :, :], axis=2), dt)
        act = round_to(round_to(g / (1.0 + tl.exp(-g)), dt) * u, dt)
        part = tl.sum(act[:, :, None] * down.to(tl.float32)[None, :, :], axis=1)  # [M_P, BLOCK_H]
        tl.atomic_add(sum_ptr + rows[:, None] * s_sum + cols[None, :], to_fixed(part), mask=ok, sem="relaxed")


def cp_mlp(x, x_delta, ln, eps: float, w_gate_up, w_down_t, out_sum, pdl: bool = False, block_i: int = 8,
           num_warps: int = 4) -> None:
    """x [M, H] (M <= MAX_ROWS), x_delta [>= M, H] int64, ln [H], w_gate_up [2 I, H], w_down_t [I, H], out_sum [>= M, H]
    int64 -> out_sum += the MLP's down product of x + x_delta in 2^-32 units. block_i: intermediate features a
    program."""
    if not HAVE_TRITON:
        return cp_mlp_ref(x, x_delta, ln, eps, w_gate_up, w_down_t, out_sum)
    m, h = x.shape
    n_inter = w_down_t.shape[0]
    if m > MAX_ROWS:
        raise ValueError(f"cp_mlp holds at most {MAX_ROWS} rows, got {m}")
    if w_gate_up.shape != (2 * n_inter, h) or w_down_t.shape != (n_inter, h) or ln.shape != (h,):
        raise ValueError(f"need w_gate_up [2 I, H], w_down_t [I, H], ln [H] for x [M, {h}], got "
                         f"{tuple(w_gate_up.shape)}, {tuple(w_down_t.shape)}, {tuple(ln.shape)}")
    if not (x.dtype == ln.dtype == w_gate_up.dtype == w_down_t.dtype):
        raise ValueError("x, ln and the weights must share one dtype")
    if not (w_gate_up.is_contiguous() and w_down_t.is_contiguous() and ln.is_contiguous()) or x.stride(1) != 1:
        raise ValueError("the weights must be contiguous and x's rows unit-stride")
    for name, t in (("x_delta", x_delta), ("out_sum", out_sum)):
        if t.dtype != torch.int64 or t.dim() != 2 or t.shape[0] < m or t.shape[1] != h or t.stride(1) != 1:
            raise ValueError(f"{name} must be int64 [>= {m}, {h}] with unit column stride, got {t.dtype} "
                             f"{tuple(t.shape)}")
    if block_i != next_pow2(block_i):
        raise ValueError(f"block_i must be a power of two, got {block_i}")
    _cp_mlp_kernel[(triton.cdiv(n_inter, block_i),)](
        x, x_delta, ln, w_gate_up, w_down_t, out_sum, m, n_inter, h, eps, x.stride(0), x_delta.stride(0),
        out_sum.stride(0), M_P=max(1, next_pow2(m)), BLOCK_I=block_i, BLOCK_H=next_pow2(h), PDL=pdl,
        num_warps=num_warps, **pdl_launch(pdl))
