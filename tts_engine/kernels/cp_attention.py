"""Attention of the code predictor over its short per-frame cache.

    q        [B, T, Hq, D]     T new positions start .. start + T - 1 of rows 0 .. B-1 (RoPE applied)
    k_cache  [R, Hkv, P, D]    R >= B rows, P (16) positions; rows 0 .. B-1 are this batch
    v_cache  [R, Hkv, P, D]
    start    int               position of the first query; the same for every row
    -> out   [B, T, Hq, D]     query t sees keys 0 .. start + t (causal)

Every row of a code-predictor step has the same length, and that length is a Python int of the
unrolled frame loop, so it is baked into the captured graph: no length tensor, no split, the
whole cache of a (row, kv head) is one [P, D] block. One program per (row, position, kv head)
serves the head's GROUP query heads.

`cp_qk_attention` is the same attention with the step before it fused in (kernels/qk_norm_rope.py:
per-head q/k RMSNorm, RoPE, the new K/V stored into the cache), from the qkv projection's output:

    qkv      [B T, (Hq + 2 Hkv) D]   token (b, t) in row b T + t, at position start + t
    -> out   [B T, Hq, D]

one launch a layer instead of two (each of the code predictor's 15 passes a frame goes through its 5 layers). One
program per (row, kv head) handles the row's T tokens: the keys of position start that its query at
start + 1 reads are its own, kept in registers (no store-then-reload).
"""

from __future__ import annotations

import math

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch
from .qk_norm_rope import qk_norm_rope_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to
    from .qk_norm_rope import norm_rope_tables, norm_rope_values

LOG2E = 1.4426950408889634


def cp_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start: int) -> torch.Tensor:
    b, t, hq, _ = q.shape
    hkv, p = k_cache.shape[1], k_cache.shape[2]
    k = k_cache[:b].repeat_interleave(hq // hkv, dim=1)  # [B, Hq, P, D]
    v = v_cache[:b].repeat_interleave(hq // hkv, dim=1)
    mask = torch.arange(p, device=q.device)[None] <= start + torch.arange(t, device=q.device)[:, None]  # [T, P]
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask)
    return out.transpose(1, 2)  # [B, T, Hq, D]


if HAVE_TRITON:

    @triton.jit
    def _cp_attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, start, scale,
                             sq_b, sq_t, sq_h, sk_n, sk_h, sk_l, so_b, so_t, so_h,
                             T: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr, D: tl.constexpr,
                             P: tl.constexpr, BLOCK_P: tl.constexpr, PDL: tl.constexpr):
        pdl_start(PDL)
        bt = tl.program_id(0)
        kvh = tl.program_id(1)
        b = (bt // T).to(tl.int64)
        t = bt % T
        g = tl.arange(0, GROUP_P)
        g_ok = g < GROUP
        d = tl.arange(0, D)
        heads = kvh * GROUP + g
        q = tl.load(q_ptr + b * sq_b + t * sq_t + heads[:, None] * sq_h + d[None, :], mask=g_ok[:, None], other=0.0)
        q = q.to(tl.float32) * scale
        pos = tl.arange(0, BLOCK_P)
        ok = pos <= start + t
        kv_off = b * sk_n + kvh * sk_h + pos[:, None] * sk_l + d[None, :]
        k = tl.load(k_ptr + kv_off, mask=ok[:, None], other=0.0).to(tl.float32)  # [BLOCK_P, D]
        v = tl.load(v_ptr + kv_off, mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # [GROUP_P, BLOCK_P]
        s = tl.where(ok[None, :], s, float("-inf"))
        p = tl.exp2(s - tl.max(s, axis=1)[:, None])
        dt = out_ptr.dtype.element_ty
        out = round_to(tl.sum(p[:, :, None] * v[None, :, :], axis=1) / tl.sum(p, axis=1)[:, None], dt)
        tl.store(out_ptr + b * so_b + t * so_t + heads[:, None] * so_h + d[None, :], out.to(dt),
                 mask=g_ok[:, None])


def cp_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start: int,
                 pdl: bool = False) -> torch.Tensor:
    if not HAVE_TRITON:
        return cp_attention_ref(q, k_cache, v_cache, start)
    b, t, hq, d = q.shape
    hkv, p = k_cache.shape[1], k_cache.shape[2]
    if start < 0 or start + t > p or b > k_cache.shape[0]:
        raise ValueError(f"positions {start}..{start + t - 1} of {b} rows do not fit a cache of {tuple(k_cache.shape)}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("cp_attention needs k/v caches of one layout with the head dimension contiguous")
    if hq % hkv or d != next_pow2(d):
        raise ValueError(f"need Hq a multiple of Hkv and a power-of-two head dim, got {hq}, {hkv}, {d}")
    group = hq // hkv
    out = torch.empty_like(q)
    _cp_attention_kernel[(b * t, hkv)](
        q, k_cache, v_cache, out, start, LOG2E / math.sqrt(d),
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        T=t, GROUP=group, GROUP_P=next_pow2(group), D=d, P=p, BLOCK_P=next_pow2(p), num_warps=4,
        PDL=pdl, **pdl_launch(pdl))
    return out


def cp_qk_attention_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start: int, t: int, eps: float,
                        num_heads: int, num_kv_heads: int) -> torch.Tensor:
    n = qkv.shape[0]
    rows = torch.arange(n // t, device=qkv.device).repeat_interleave(t)
    positions = start + torch.arange(t, device=qkv.device).repeat(n // t)
    q = qk_norm_rope_ref(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps, num_heads,
                         num_kv_heads)
    return cp_attention_ref(q.unflatten(0, (n // t, t)), k_cache, v_cache, start).flatten(0, 1)


if HAVE_TRITON:

    @triton.jit
    def cp_attention_setup(k_ptr, v_ptr, kn_ptr, qn_ptr, cos_ptr, sin_ptr, cache, start, s_pos, T: tl.constexpr,
                           D: tl.constexpr, BLOCK_P: tl.constexpr):
        """What a program of (row, kv head) reads before the PDL wait: the cache's earlier positions (written by
        earlier passes, not by the kernel before this one) as fp32 keys/values [BLOCK_P, D], and the norm weights
        and RoPE rows of positions start (keys) and start + T - 1 (queries, T <= 2): constants, out of L2 by now."""
        d = tl.arange(0, D)
        pos = tl.arange(0, BLOCK_P)
        earlier = pos < start
        kv_off = cache + pos[:, None] * s_pos + d[None, :]
        keys = tl.load(k_ptr + kv_off, mask=earlier[:, None], other=0.0).to(tl.float32)
        values = tl.load(v_ptr + kv_off, mask=earlier[:, None], other=0.0).to(tl.float32)
        rot = tl.where(d < D // 2, d + D // 2, d - D // 2)  # the element rotate_half puts at d
        kw, kwr, cos0, sin0 = norm_rope_tables(kn_ptr, cos_ptr, sin_ptr, d[None, :], rot[None, :], start, D)
        qw, qwr, cos1, sin1 = norm_rope_tables(qn_ptr, cos_ptr, sin_ptr, d[None, :], rot[None, :], start + T - 1, D)
        return keys, values, kw, kwr, qw, qwr, cos0, sin0, cos1, sin1

    @triton.jit
    def cp_new_keys(qkv_ptr, k_ptr, v_ptr, row, kvh, cache, start, eps, s_qkv, s_pos, keys, values, kw, kwr, cos0,
                    sin0, cos1, sin1, store, T: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                    BLOCK_P: tl.constexpr):
        """The row's T new keys (normed, rotated) and values of kv head kvh, from the qkv product: into the cache
        for later passes (where `store`), and into this program's copy of it (keys/values [BLOCK_P, D], returned),
        which its queries read."""
        dt = qkv_ptr.dtype.element_ty
        d = tl.arange(0, D)
        pos = tl.arange(0, BLOCK_P)
        rot = tl.where(d < D // 2, d + D // 2, d - D // 2)
        keep = d < tl.where(store, D, 0)  # (a scalar mask does not broadcast in the interpreter)
        for t in tl.static_range(T):
            src = qkv_ptr + (row * T + t) * s_qkv
            cos_t, sin_t = (cos0, sin0) if t == 0 else (cos1, sin1)
            k_at = src + (HQ + kvh) * D
            k = norm_rope_values(tl.load(k_at + d)[None, :].to(tl.float32), tl.load(k_at + rot)[None, :].to(tl.float32),
                                 kw, kwr, cos_t, sin_t, d[None, :], eps, D, dt)  # [1, D]
            v = tl.load(src + (HQ + HKV + kvh) * D + d)
            tl.store(k_ptr + cache + (start + t) * s_pos + d[None, :], k.to(dt), mask=keep[None, :])
            tl.store(v_ptr + cache + (start + t) * s_pos + d, v, mask=keep)
            keys = tl.where((pos == start + t)[:, None], k, keys)
            values = tl.where((pos == start + t)[:, None], v.to(tl.float32)[None, :], values)
        return keys, values

    @triton.jit
    def cp_attend(qkv_ptr, row, kvh, t, start, eps, scale, s_qkv, keys, values, qw, qwr, cos_t, sin_t,
                  T: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr, D: tl.constexpr, BLOCK_P: tl.constexpr):
        """Token t's queries of kv head kvh's GROUP heads (normed, rotated) against keys/values [BLOCK_P, D] (causal)
        -> the attention output [GROUP_P, D], fp32 holding values rounded to the qkv dtype."""
        dt = qkv_ptr.dtype.element_ty
        d = tl.arange(0, D)
        g = tl.arange(0, GROUP_P)
        g_ok = g < GROUP
        rot = tl.where(d < D // 2, d + D // 2, d - D // 2)
        src = qkv_ptr + (row * T + t) * s_qkv + (kvh * GROUP + g)[:, None] * D
        x = tl.load(src + d[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32)
        xr = tl.load(src + rot[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32)
        q = norm_rope_values(x, xr, qw, qwr, cos_t, sin_t, d[None, :], eps, D, dt) * scale  # [GROUP_P, D]
        ok = tl.arange(0, BLOCK_P) <= start + t
        s = tl.sum(q[:, None, :] * keys[None, :, :], axis=2)  # [GROUP_P, BLOCK_P]
        s = tl.where(ok[None, :], s, float("-inf"))
        p = tl.exp2(s - tl.max(s, axis=1)[:, None])
        return round_to(tl.sum(p[:, :, None] * values[None, :, :], axis=1) / tl.sum(p, axis=1)[:, None], dt)

    @triton.jit
    def _cp_qk_attention_kernel(qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr, out_ptr, start, eps, scale,
                                s_qkv, s_row, s_head, s_pos, so_tok, so_h,
                                T: tl.constexpr, HQ: tl.constexpr, HKV: tl.constexpr, GROUP: tl.constexpr,
                                GROUP_P: tl.constexpr, D: tl.constexpr, BLOCK_P: tl.constexpr, PDL: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1)
        cache = row * s_row + kvh * s_head
        keys, values, kw, kwr, qw, qwr, cos0, sin0, cos1, sin1 = cp_attention_setup(
            k_ptr, v_ptr, kn_ptr, qn_ptr, cos_ptr, sin_ptr, cache, start, s_pos, T, D, BLOCK_P)
        pdl_start(PDL)
        keys, values = cp_new_keys(qkv_ptr, k_ptr, v_ptr, row, kvh, cache, start, eps, s_qkv, s_pos, keys, values,
                                   kw, kwr, cos0, sin0, cos1, sin1, kvh >= 0, T, HQ, HKV, D, BLOCK_P)
        d = tl.arange(0, D)
        g = tl.arange(0, GROUP_P)
        dt = out_ptr.dtype.element_ty
        for t in tl.static_range(T):
            cos_t, sin_t = (cos0, sin0) if t == 0 else (cos1, sin1)
            out = cp_attend(qkv_ptr, row, kvh, t, start, eps, scale, s_qkv, keys, values, qw, qwr, cos_t, sin_t,
                            T, GROUP, GROUP_P, D, BLOCK_P)
            tl.store(out_ptr + (row * T + t) * so_tok + (kvh * GROUP + g)[:, None] * so_h + d[None, :], out.to(dt),
                     mask=(g < GROUP)[:, None])


def check_qk_attention(name: str, qkv, q_norm, cos, k_cache, v_cache, start: int, t: int, num_heads: int,
                       num_kv_heads: int) -> None:
    """The checks `cp_qk_attention` and `cp_attention_o` make of their shared arguments (ValueError)."""
    n, d = qkv.shape[0], q_norm.shape[0]
    if t not in (1, 2):
        raise ValueError(f"{name} takes 1 or 2 new positions a row (a pass, its prefill), got {t}")
    if n % t or start < 0 or start + t > k_cache.shape[2] or n // t > k_cache.shape[0]:
        raise ValueError(f"{n} tokens at positions {start}..{start + t - 1}, {t} a row, do not fit a cache of "
                         f"{tuple(k_cache.shape)}")
    if qkv.shape[1] != (num_heads + 2 * num_kv_heads) * d or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [N, (Hq + 2 Hkv) D] with unit column stride, got {tuple(qkv.shape)}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1 or cos.stride() != (d, 1):
        raise ValueError("k/v caches must share strides with D contiguous; cos/sin must be contiguous [P, D]")
    if num_heads % num_kv_heads or d != next_pow2(d):
        raise ValueError(f"need Hq a multiple of Hkv and a power-of-two head dim, got {num_heads}, {num_kv_heads}, {d}")
    if not (qkv.dtype == k_cache.dtype == cos.dtype == q_norm.dtype):
        raise ValueError("qkv, caches, RoPE tables and norm weights must share one dtype")


def cp_qk_attention(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start: int, t: int, eps: float,
                    num_heads: int, num_kv_heads: int, pdl: bool = False, num_warps: int = 4) -> torch.Tensor:
    """qkv [B T, (Hq + 2 Hkv) D] of B rows' tokens at positions start .. start + t - 1; caches [R, Hkv, P, D]
    (R >= B) -> attention output [B T, Hq, D], the new K/V stored at rows 0 .. B-1 of the caches."""
    if not HAVE_TRITON:
        return cp_qk_attention_ref(qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, start, t, eps, num_heads,
                                   num_kv_heads)
    check_qk_attention("cp_qk_attention", qkv, q_norm, cos, k_cache, v_cache, start, t, num_heads, num_kv_heads)
    n, d = qkv.shape[0], q_norm.shape[0]
    p = k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty(n, num_heads, d, device=qkv.device, dtype=qkv.dtype)
    _cp_qk_attention_kernel[(n // t, num_kv_heads)](
        qkv, q_norm, k_norm, cos, sin, k_cache, v_cache, out, start, eps, LOG2E / math.sqrt(d),
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1),
        T=t, HQ=num_heads, HKV=num_kv_heads, GROUP=group, GROUP_P=next_pow2(group), D=d, BLOCK_P=next_pow2(p),
        num_warps=num_warps, PDL=pdl, **pdl_launch(pdl))
    return out
