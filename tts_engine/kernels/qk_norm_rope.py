"""Per-head q/k RMSNorm + rotate-half RoPE on the fused qkv projection, with K/V written straight
into a slot KV cache.

    qkv        [N, (Hq + 2 Hkv) D]   one row per new token (q heads, then k heads, then v heads)
    q_norm     [D], k_norm [D]
    cos, sin   [P, D]                RoPE tables in the model dtype, row p = position p
    positions  [N] int64             each token's position (row of the tables, column of the cache)
    rows       [N] int64             each token's cache row (a talker slot, or a CP batch row)
    k_cache    [R, Hkv, L, D]        written at [rows[n], :, positions[n]]; v_cache likewise
    -> q       [N, Hq, D]            normed, rotated

Rounding is the reference's: the norm as `rms_norm_ref`, then `x * cos + rotate_half(x) * sin`
with each product and the sum rounded to the model dtype. One program per (token, head); programs
of the k heads also copy that head's v. Serves both the talker cache [slots + 1, Hkv, L, D] and the
code predictor's [B, Hkv, 16, D].
"""

from __future__ import annotations

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch
from .rms_norm import rms_norm_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def qk_norm_rope_ref(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps: float,
                     num_heads: int, num_kv_heads: int) -> torch.Tensor:
    d = q_norm.shape[0]
    q, k, v = qkv.split((num_heads * d, num_kv_heads * d, num_kv_heads * d), dim=-1)
    c, s = cos[positions][:, None], sin[positions][:, None]  # [N, 1, D]
    q = rms_norm_ref(q.unflatten(-1, (num_heads, d)), q_norm, eps)  # [N, Hq, D]
    k = rms_norm_ref(k.unflatten(-1, (num_kv_heads, d)), k_norm, eps)
    q = q * c + rotate_half(q) * s
    k = k * c + rotate_half(k) * s
    k_cache[rows, :, positions] = k
    v_cache[rows, :, positions] = v.unflatten(-1, (num_kv_heads, d))
    return q


if HAVE_TRITON:

    @triton.jit
    def norm_rope_tables(w_ptr, cos_ptr, sin_ptr, d, rot, pos, D: tl.constexpr):
        """The constants of a head's norm + RoPE at position pos, fp32: the norm weight at d and at rot,
        the cos and sin rows (d / rot [1, D] or [D]). Written before a step begins, so a kernel under PDL
        reads them before its wait (each layer's norm weights are out of L2 by the time it runs again)."""
        return (tl.load(w_ptr + d).to(tl.float32), tl.load(w_ptr + rot).to(tl.float32),
                tl.load(cos_ptr + pos * D + d).to(tl.float32), tl.load(sin_ptr + pos * D + d).to(tl.float32))

    @triton.jit
    def norm_rope_values(x, xr, w, wr, c, s, d, eps, D: tl.constexpr, dt: tl.constexpr):
        """Heads x [R, D] (and xr: each row's elements at rot, the ones rotate_half brings to d) -> each
        row's RMSNorm then RoPE, rounded as `qk_norm_rope_ref`, fp32 holding values of dtype dt; the
        tables from `norm_rope_tables`. (The kernel below is the same math for one head a program.)"""
        sign = tl.where(d < D // 2, -1.0, 1.0)
        r = tl.rsqrt(tl.sum(x * x, axis=1) / D + eps)[:, None]
        n = round_to(round_to(x * r, dt) * w, dt)
        nr = round_to(round_to(xr * r, dt) * wr, dt)
        return round_to(round_to(n * c, dt) + round_to(sign * nr * s, dt), dt)

    @triton.jit
    def _qk_norm_rope_kernel(qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr, rows_ptr, q_ptr, k_ptr, v_ptr,
                             s_qkv, s_cache_row, s_cache_head, s_cache_pos, eps,
                             HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
                             PDL: tl.constexpr):
        tok = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        pos = tl.load(pos_ptr + tok)  # the positions, tables and norm weights: written before the step
        half = D // 2
        d = tl.arange(0, BLOCK_D)
        ok = d < D
        rot = tl.where(d < half, d + half, d - half)  # the element rotate_half puts at d
        sign = tl.where(d < half, -1.0, 1.0)
        c = tl.load(cos_ptr + pos * D + d, mask=ok, other=0.0).to(tl.float32)
        s = tl.load(sin_ptr + pos * D + d, mask=ok, other=0.0).to(tl.float32)
        is_q = head < HQ
        w = tl.where(is_q, tl.load(qn_ptr + d, mask=ok, other=0.0), tl.load(kn_ptr + d, mask=ok, other=0.0))
        wr = tl.where(is_q, tl.load(qn_ptr + rot, mask=ok, other=0.0), tl.load(kn_ptr + rot, mask=ok, other=0.0))
        w, wr = w.to(tl.float32), wr.to(tl.float32)
        pdl_start(PDL)
        src = qkv_ptr + tok * s_qkv + head * D  # q heads then k heads: one running index
        dt = qkv_ptr.dtype.element_ty
        x = tl.load(src + d, mask=ok, other=0.0).to(tl.float32)
        xr = tl.load(src + rot, mask=ok, other=0.0).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / D + eps)
        n = round_to(round_to(x * r, dt) * w, dt)  # rms_norm_ref at d
        nr = round_to(round_to(xr * r, dt) * wr, dt)  # and at the element rotate_half brings to d
        y = round_to(round_to(n * c, dt) + round_to(sign * nr * s, dt), dt).to(dt)
        if head < HQ:
            tl.store(q_ptr + (tok * HQ + head) * D + d, y, mask=ok)
        else:
            kvh = head - HQ
            row = tl.load(rows_ptr + tok)
            dst = row * s_cache_row + kvh * s_cache_head + pos * s_cache_pos + d
            tl.store(k_ptr + dst, y, mask=ok)
            v = tl.load(qkv_ptr + tok * s_qkv + (HQ + HKV + kvh) * D + d, mask=ok, other=0.0)
            tl.store(v_ptr + dst, v, mask=ok)


def qk_norm_rope(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps: float,
                 num_heads: int, num_kv_heads: int, pdl: bool = False) -> torch.Tensor:
    if not HAVE_TRITON:
        return qk_norm_rope_ref(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps,
                                num_heads, num_kv_heads)
    n = qkv.shape[0]
    d = q_norm.shape[0]
    if qkv.shape[1] != (num_heads + 2 * num_kv_heads) * d or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [N, (Hq + 2 Hkv) D] with unit column stride, got {tuple(qkv.shape)}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1 or cos.stride() != (d, 1):
        raise ValueError("k/v caches must share strides with D contiguous; cos/sin must be contiguous [P, D]")
    if not (qkv.dtype == k_cache.dtype == cos.dtype == q_norm.dtype):
        raise ValueError("qkv, caches, RoPE tables and norm weights must share one dtype")
    q = torch.empty(n, num_heads, d, device=qkv.device, dtype=qkv.dtype)
    _qk_norm_rope_kernel[(n, num_heads + num_kv_heads)](
        qkv, q_norm, k_norm, cos, sin, positions, rows, q, k_cache, v_cache,
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), eps,
        HQ=num_heads, HKV=num_kv_heads, D=d, BLOCK_D=next_pow2(d), num_warps=1, PDL=pdl,
        **pdl_launch(pdl))
    return q
