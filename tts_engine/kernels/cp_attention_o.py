"""The code predictor's attention and its o product in one launch, the o product summed across kv heads in
int64 fixed point.

    qkv      [B T, (Hq + 2 Hkv) D]   token (b, t) in row b T + t, at position start + t (as `cp_qk_attention`)
    w_o      [H, Hq D]
    o_sum    [>= B T, H] int64       zero on entry; += the o product of the attention output, in 2^-32 units
                                     (`backend.FIXED_ONE`); the new K/V stored at rows 0 .. B-1 of the caches

Why: in a batch-1 code-predictor pass the attention (3.4 µs of critical path) and o (4.1
µs, 1 µs of weights) are two launches whose work after the PDL wait is a chain of small dependent steps. Here
one program a (row, kv head, block of BLOCK_R output features) attends for its kv head's GROUP query heads (the
attention kernel's own program), then multiplies the result by its [BLOCK_R, GROUP D] block of w_o, loaded
before the wait, and adds that partial product into o_sum. No program needs another's attention output, so
the boundary between the two launches and the store-and-reload of the attention output go. What is paid: each
kv head's attention runs once per feature block (H / BLOCK_R times, one head's worth each: redoing all
sixteen heads' attention in every o program loses), and a sum of Hkv partial products a feature that must
not depend on the order programs finish in. fp32 atomics would (the engine's graphs replay bit for bit, and a
seeded request gives the same codes at any batch position), so each partial is converted to int64 multiples of
2^-32 (exact for |x| >= 2^-8, truncated below: an error under 2^-32 a partial) and added as integers, which
commute. The consumers (`gemv`'s x_delta / residual_delta) round the sum to the model's dtype and add it to the
residual, as the reference rounds `F.linear(attn, w_o)` and then adds; the down product of the same layer reads
it last and zeroes it for the next layer. Values past ±2^31 do not fit (activations of bf16 checkpoints are far
below). Code-predictor frame 1.510 -> 1.449 ms at batch 1 (cp_launch.ATTENTION_O_LAUNCH).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .backend import FIXED_ONE, HAVE_TRITON, next_pow2, pdl_launch
from .cp_attention import LOG2E, check_qk_attention, cp_qk_attention_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, to_fixed
    from .cp_attention import cp_attend, cp_attention_setup, cp_new_keys


def cp_attention_o_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, w_o, o_sum, start: int, t: int, eps: float,
                       num_heads: int, num_kv_heads: int) -> None:
    """The kernel's result in torch: the attention (`cp_qk_attention_ref`), its o product in fp64 (the kernel's
    fixed-point sum is exact to 2^-32 a partial), added to o_sum in 2^-32 units."""
    attn = cp_qk_attention_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start, t, eps, num_heads,
                               num_kv_heads)
    o = F.linear(attn.flatten(1).double(), w_o.double())
    o_sum[:o.shape[0]] += torch.trunc(o * FIXED_ONE).to(torch.int64)


if HAVE_TRITON:

    @triton.jit
    def _cp_attention_o_kernel(qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, wo_ptr, sum_ptr, start, eps,
                               scale, n_out, s_qkv, s_row, s_head, s_pos, s_wo, s_sum,
                               T: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, GROUP: tl.constexpr,
                               GROUP_P: tl.constexpr, D: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_R: tl.constexpr,
                               PDL: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1)
        block = tl.program_id(2)
        cache = row * s_row + kvh * s_head
        keys, values, kw, kwr, qw, qwr, cos0, sin0, cos1, sin1 = cp_attention_setup(
            k_ptr, v_ptr, kn_ptr, qn_ptr, cos_ptr, sin_ptr, cache, start, s_pos, T, D, BLOCK_P)
        # This program's block of w_o: output features `feats`, the columns of kv head kvh's query heads.
        d = tl.arange(0, D)
        g = tl.arange(0, GROUP_P)
        feats = block * BLOCK_R + tl.arange(0, BLOCK_R)
        f_ok = feats < n_out
        cols = (kvh * GROUP + g)[:, None] * D + d[None, :]  # [GROUP_P, D]
        wo = tl.load(wo_ptr + feats[:, None, None].to(tl.int64) * s_wo + cols[None, :, :],
                     mask=f_ok[:, None, None] & (g < GROUP)[None, :, None], other=0.0)  # [BLOCK_R, GROUP_P, D]
        pdl_start(PDL)
        # Every feature block's program has the new keys; the first one stores them.
        keys, values = cp_new_keys(qkv_ptr, k_ptr, v_ptr, row, kvh, cache, start, eps, s_qkv, s_pos, keys, values,
                                   kw, kwr, cos0, sin0, cos1, sin1, block == 0, T, HQ, HKV, D, BLOCK_P)
        for t in tl.static_range(T):
            cos_t, sin_t = (cos0, sin0) if t == 0 else (cos1, sin1)
            attn = cp_attend(qkv_ptr, row, kvh, t, start, eps, scale, s_qkv, keys, values, qw, qwr, cos_t, sin_t,
                             T, GROUP, GROUP_P, D, BLOCK_P)  # [GROUP_P, D]
            part = tl.sum(tl.sum(wo.to(tl.float32) * attn[None, :, :], axis=2), axis=1)  # [BLOCK_R]
            tl.atomic_add(sum_ptr + (row * T + t) * s_sum + feats, to_fixed(part), mask=f_ok, sem="relaxed")


def cp_attention_o(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, w_o, o_sum, start: int, t: int, eps: float,
                   num_heads: int, num_kv_heads: int, pdl: bool = False, block_r: int = 64,
                   num_warps: int = 4) -> None:
    """qkv [B T, (Hq + 2 Hkv) D] of B rows' tokens at positions start .. start + t - 1; caches [R, Hkv, P, D]
    (R >= B); w_o [H, Hq D]; o_sum [>= B T, H] int64, zero -> o_sum holds the o product of the attention output in
    2^-32 units, and the new K/V are stored at rows 0 .. B-1 of the caches. block_r: output features a program."""
    if not HAVE_TRITON:
        return cp_attention_o_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, w_o, o_sum, start, t, eps,
                                  num_heads, num_kv_heads)
    check_qk_attention("cp_attention_o", qkv, q_norm, cos, k_cache, v_cache, start, t, num_heads, num_kv_heads)
    n, d = qkv.shape[0], q_norm.shape[0]
    p = k_cache.shape[2]
    if w_o.dtype != qkv.dtype:
        raise ValueError(f"w_o must be in qkv's dtype {qkv.dtype}, got {w_o.dtype}")
    h = w_o.shape[0]
    if w_o.shape[1] != num_heads * d or w_o.stride(1) != 1:
        raise ValueError(f"w_o must be [H, Hq D] = [H, {num_heads * d}] with unit column stride, "
                         f"got {tuple(w_o.shape)}")
    if o_sum.dtype != torch.int64 or o_sum.shape[0] < n or o_sum.shape[1] != h or o_sum.stride(1) != 1:
        raise ValueError(f"o_sum must be int64 [>= {n}, {h}] with unit column stride, got {o_sum.dtype} "
                         f"{tuple(o_sum.shape)}")
    if block_r != next_pow2(block_r):
        raise ValueError(f"block_r must be a power of two, got {block_r}")
    group = num_heads // num_kv_heads
    _cp_attention_o_kernel[(n // t, num_kv_heads, triton.cdiv(h, block_r))](
        qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, w_o, o_sum, start, eps, LOG2E / math.sqrt(d), h,
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), w_o.stride(0), o_sum.stride(0),
        T=t, HQ=num_heads, HKV=num_kv_heads, GROUP=group, GROUP_P=next_pow2(group), D=d, BLOCK_P=next_pow2(p),
        BLOCK_R=block_r, num_warps=num_warps, PDL=pdl, **pdl_launch(pdl))
