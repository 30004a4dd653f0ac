"""The code predictor's attention inside its output projection: one launch where two were.

    qkv      [T, (Hq + 2 Hkv) D]   the tokens of one row (batch 1) at positions start .. start + T - 1
    k_cache  [R, Hkv, P, D]        row 0 is this row's (its earlier positions written by earlier passes)
    v_cache  [R, Hkv, P, D]
    w_o      [H, Hq D]             the layer's o projection;  residual [T, H]
    -> residual + attention(q/k norm + RoPE of qkv, the cache) @ w_o^T     [T, H]; the new K/V stored

Why: a batch-1 code-predictor pass is a chain of dependent launches (run 16's profile: 5 a layer, 3.4-4.6
µs of critical path each against 1.0-2.9 µs of weights; a PDL boundary costs ~1.3 µs beyond the weights,
`bench.grid_barrier`). The attention over <= 16 positions is small enough for every program of the o
product to compute it whole: each of the H / BLOCK_N programs loads its rows of w_o and the cache's
earlier positions (all kv heads, ~64 KB from L2) before the wait for the qkv product, then normalises
and rotates the new token's q and k, attends for all Hq heads, and multiplies its rows of w_o by the
result. The attention output never goes through memory between launches, and the layer has 4 launches.
Program 0 also stores the new K/V into the cache for later passes (every program computes the same
values; one writes them).

Rounding is the unfused path's: q/k as `qk_norm_rope_ref`, the attention output rounded to the dtype (as
`cp_qk_attention` stores it), the product rounded, then the residual added and rounded (`gemv`'s
epilogue). The product's fp32 sum runs in another order than `gemv`'s, so an element may differ by one
ulp. Each program stages its attention output in a scratch row of its own ([programs, Hq D]) between
the attention's layout and the product's; the row never leaves the SM's L1 in practice.

Status: CPU-tested against the reference and the two kernels it replaces (interpreter); off by
default (`FastPathOptions.cp_attention_o`), untimed on the GPU.
"""

from __future__ import annotations

import math

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch
from .cp_attention import LOG2E, cp_qk_attention_ref
from .gemv import gemv_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import gdc_launch_dependents, gdc_wait, round_to
    from .qk_norm_rope import norm_rope_rows


def cp_attention_o_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start: int, eps: float, num_heads: int,
                       num_kv_heads: int, w_o: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    t = qkv.shape[0]
    attn = cp_qk_attention_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start, t, eps, num_heads,
                               num_kv_heads)  # [T, Hq, D]
    return gemv_ref(attn.flatten(1).to(qkv.dtype), w_o, residual=residual)


if HAVE_TRITON:

    @triton.jit
    def _cp_attention_o_kernel(qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, w_ptr, r_ptr, y_ptr,
                               scratch_ptr, start, eps, scale, n_out, s_qkv, s_head, s_pos, s_w, s_r, s_y,
                               T: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, GROUP: tl.constexpr,
                               D: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr):
        pid = tl.program_id(0)
        dt = qkv_ptr.dtype.element_ty
        k_in: tl.constexpr = HQ * D
        feats = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        f_ok = feats < n_out
        cols = tl.arange(0, k_in)
        # Before the wait: this program's rows of w_o and the cache's earlier positions, neither written
        # by the kernel before this one.
        w = tl.load(w_ptr + feats[:, None].to(tl.int64) * s_w + cols[None, :], mask=f_ok[:, None], other=0.0)
        hh = tl.arange(0, HKV)
        pos = tl.arange(0, BLOCK_P)
        d = tl.arange(0, D)
        kv_off = hh[:, None, None] * s_head + pos[None, :, None] * s_pos + d[None, None, :]  # [HKV, BLOCK_P, D]
        earlier = (pos < start)[None, :, None]
        keys = tl.load(k_ptr + kv_off, mask=earlier, other=0.0)  # in the cache's dtype: half the registers
        values = tl.load(v_ptr + kv_off, mask=earlier, other=0.0)
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        rot = tl.where(d < D // 2, d + D // 2, d - D // 2)  # the element rotate_half puts at d
        every_head = (hh < HKV)[:, None]
        writer = (hh[:, None] * 0 + pid) == 0  # [HKV, 1]: program 0 stores the new K/V
        for t in tl.static_range(T):  # the new tokens' keys (normed, rotated) and values
            src = qkv_ptr + t * s_qkv
            k = norm_rope_rows(src + (HQ + hh[:, None]) * D, d[None, :], rot[None, :], every_head, kn_ptr, cos_ptr,
                               sin_ptr, start + t, eps, D, dt)  # [HKV, D]
            v = tl.load(src + (HQ + HKV + hh[:, None]) * D + d[None, :])  # [HKV, D]
            new = hh[:, None] * s_head + (start + t) * s_pos + d[None, :]
            tl.store(k_ptr + new, k.to(dt), mask=writer)
            tl.store(v_ptr + new, v, mask=writer)
            at = (pos == start + t)[None, :, None]
            keys = tl.where(at, k.to(dt)[:, None, :], keys)
            values = tl.where(at, v[:, None, :], values)
        scratch = scratch_ptr + pid.to(tl.int64) * k_in
        for t in tl.static_range(T):
            src = qkv_ptr + t * s_qkv
            ok = (pos <= start + t)[None, :]
            for g in tl.static_range(GROUP):  # query head h GROUP + g of every kv head h at once
                heads = hh * GROUP + g
                q = norm_rope_rows(src + heads[:, None] * D, d[None, :], rot[None, :], every_head, qn_ptr, cos_ptr,
                                   sin_ptr, start + t, eps, D, dt) * scale  # [HKV, D]
                s = tl.where(ok, tl.sum(q[:, None, :] * keys.to(tl.float32), axis=2), float("-inf"))  # [HKV, BLOCK_P]
                p = tl.exp2(s - tl.max(s, axis=1)[:, None])
                out = round_to(tl.sum(p[:, :, None] * values.to(tl.float32), axis=1) / tl.sum(p, axis=1)[:, None],
                               dt)  # [HKV, D]
                tl.store(scratch + heads[:, None] * D + d[None, :], out.to(dt))
            tl.debug_barrier()  # the program's threads wrote the row in the attention's layout
            x = tl.load(scratch + cols).to(tl.float32)  # [Hq D]
            acc = round_to(tl.sum(w.to(tl.float32) * x[None, :], axis=1), dt)  # [BLOCK_N]
            res = tl.load(r_ptr + t * s_r + feats, mask=f_ok, other=0.0).to(tl.float32)
            tl.store(y_ptr + t * s_y + feats, round_to(res + acc, dt).to(dt), mask=f_ok)
            tl.debug_barrier()  # every thread has read the row before the next token's attention rewrites it


def cp_attention_o(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start: int, eps: float, num_heads: int,
                   num_kv_heads: int, w_o: torch.Tensor, residual: torch.Tensor, *, block_n: int = 8,
                   num_warps: int = 8, pdl: bool = False) -> torch.Tensor:
    """qkv [T, (Hq + 2 Hkv) D] of one row's tokens at positions start .. start + T - 1 (T 1 or 2); caches
    [R, Hkv, P, D] (row 0 is this row's); w_o [H, Hq D]; residual [T, H] -> residual + o(attention) [T, H],
    the new K/V stored at row 0 of the caches. block_n: rows of w_o a program."""
    if not HAVE_TRITON:
        return cp_attention_o_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start, eps, num_heads,
                                  num_kv_heads, w_o, residual)
    t, d = qkv.shape[0], q_norm.shape[0]
    p = k_cache.shape[2]
    if t not in (1, 2) or start < 0 or start + t > p:
        raise ValueError(f"cp_attention_o takes 1 or 2 tokens of one row at positions that fit a cache of {p}, "
                         f"got {t} at {start}")
    if qkv.shape[1] != (num_heads + 2 * num_kv_heads) * d or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [T, (Hq + 2 Hkv) D] with unit column stride, got {tuple(qkv.shape)}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1 or cos.stride() != (d, 1):
        raise ValueError("k/v caches must share strides with D contiguous; cos/sin must be contiguous [P, D]")
    if num_heads % num_kv_heads or any(n != next_pow2(n) for n in (d, num_kv_heads, num_heads * d)):
        raise ValueError(f"need Hq a multiple of Hkv and powers of two for D, Hkv and Hq D, got {num_heads}, "
                         f"{num_kv_heads}, {d}")
    if w_o.shape[1] != num_heads * d or w_o.stride(1) != 1 or residual.shape != (t, w_o.shape[0]) \
            or residual.stride(1) != 1:
        raise ValueError(f"w_o must be [H, Hq D] and residual [T, H] with rows contiguous, got {tuple(w_o.shape)}, "
                         f"{tuple(residual.shape)}")
    if not (qkv.dtype == k_cache.dtype == cos.dtype == q_norm.dtype == w_o.dtype == residual.dtype):
        raise ValueError("qkv, caches, RoPE tables, norm weights, w_o and residual must share one dtype")
    n_out = w_o.shape[0]
    programs = triton.cdiv(n_out, block_n)
    y = torch.empty_like(residual)
    scratch = torch.empty(programs, num_heads * d, device=qkv.device, dtype=qkv.dtype)
    _cp_attention_o_kernel[(programs,)](
        qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, w_o, residual, y, scratch, start, eps, LOG2E / math.sqrt(d),
        n_out, qkv.stride(0), k_cache.stride(1), k_cache.stride(2), w_o.stride(0), residual.stride(0), y.stride(0),
        T=t, HQ=num_heads, HKV=num_kv_heads, GROUP=num_heads // num_kv_heads, D=d, BLOCK_P=next_pow2(p),
        BLOCK_N=block_n, PDL=pdl, num_warps=num_warps, **pdl_launch(pdl))
    return y
