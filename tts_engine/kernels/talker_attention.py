"""The talker's decode attention with the step before it fused in: per-head q/k RMSNorm, RoPE, the new
K/V stored into the slot cache, and attention over the row's whole context, in one launch.

    qkv        [B, (Hq + 2 Hkv) D]   one new token a row (the qkv product's output, before its norms)
    q_norm     [D], k_norm [D]
    cos, sin   [P, D]                RoPE tables, row p = position p
    positions  [B] int64             each token's position: it attends to keys 0 .. position
    rows       [B] int64             each token's cache row (a talker slot)
    k_cache    [R, Hkv, L, D]        written at [rows[b], :, positions[b]]; v_cache likewise
    -> out     [B, Hq, D]

The same as `qk_norm_rope` then `decode_attention` (the reference below is those two references), in
one program per (row, kv head) with the head's GROUP query heads: no key chunks, so no merge launch,
and the query heads are normalised and rotated once, not once a chunk (the q/k norm inside the split
kernel loses: 256 programs each redoing it after the wait cost more than the launch it saves). The
new position's key and value stay in registers for this step's own query; the earlier positions are
read from the cache, the first block of them (`early`) before the wait for the qkv product under PDL
(earlier steps wrote them, and the positions and rows were written before the step began).

Why one program a kv head is enough at batch 1: a short context is one or two blocks of keys, against
the split kernel's second launch and the separate q/k norm (2.9 + 1.8 µs a layer).
With 8 warps and 128-key blocks the talker step goes 1.220 -> 1.099 ms
at 12 positions, 1.223 -> 1.181 at 256; past ~300 the serial walk over the keys loses (1.318 against 1.227
at 448), so the runner uses it up to `talker_qk_attention_context` positions and the split kernel beyond.
"""

from __future__ import annotations

import math

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch
from .decode_attention import decode_attention_ref
from .qk_norm_rope import qk_norm_rope_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import gdc_launch_dependents, gdc_wait, round_to
    from .qk_norm_rope import norm_rope_tables, norm_rope_values

LOG2E = 1.4426950408889634


def decode_qk_attention_ref(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps: float,
                            num_heads: int, num_kv_heads: int) -> torch.Tensor:
    q = qk_norm_rope_ref(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps, num_heads,
                         num_kv_heads)
    return decode_attention_ref(q, k_cache, v_cache, rows, positions + 1)


if HAVE_TRITON:

    @triton.jit
    def _attend_block(q, keys, values, ok, m, den, acc, scale, DOT: tl.constexpr, DOT_FP32: tl.constexpr):
        """One block of keys [BLOCK_N, D] / values (ok [BLOCK_N]: which exist) into the online softmax of
        q [GROUP_P, D]: running max m, denominator den [GROUP_P], unnormalised output acc [GROUP_P, D]."""
        if DOT:
            if DOT_FP32:
                s = tl.dot(q.to(tl.float32), tl.trans(keys.to(tl.float32)), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(keys))
        else:
            s = tl.sum(q.to(tl.float32)[:, None, :] * keys.to(tl.float32)[None, :, :], axis=2)
        s = tl.where(ok[None, :], s * scale, float("-inf"))  # [GROUP_P, BLOCK_N], log2 units
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        if DOT:
            if DOT_FP32:
                pv = tl.dot(p, values.to(tl.float32), input_precision="ieee")
            else:
                pv = tl.dot(p.to(values.dtype), values)
        else:
            pv = tl.sum(p[:, :, None] * values.to(tl.float32)[None, :, :], axis=1)
        return m_new, den * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + pv

    @triton.jit
    def _decode_qk_attention_kernel(qkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr, rows_ptr, k_ptr, v_ptr,
                                    out_ptr, eps, scale, s_qkv, s_row, s_head, s_pos, so_b, so_h,
                                    HQ: tl.constexpr, HKV: tl.constexpr, GROUP: tl.constexpr,
                                    GROUP_P: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
                                    DOT: tl.constexpr, DOT_FP32: tl.constexpr, EARLY: tl.constexpr,
                                    STAGES: tl.constexpr, PDL: tl.constexpr):
        b = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1)
        dt = qkv_ptr.dtype.element_ty
        pos = tl.load(pos_ptr + b)  # written before the step: safe before the wait
        cache = tl.load(rows_ptr + b) * s_row + kvh * s_head
        d = tl.arange(0, D)
        blk = tl.arange(0, BLOCK_N)
        first = blk < pos  # the first block of earlier positions
        first_at = cache + blk[:, None] * s_pos + d[None, :]
        rot = tl.where(d < D // 2, d + D // 2, d - D // 2)  # the element rotate_half puts at d
        # The norm weights and the RoPE row: constants of the step (and out of L2 since the layer last ran).
        kw, kwr, c, s = norm_rope_tables(kn_ptr, cos_ptr, sin_ptr, d[None, :], rot[None, :], pos, D)
        qw, qwr = tl.load(qn_ptr + d[None, :]).to(tl.float32), tl.load(qn_ptr + rot[None, :]).to(tl.float32)
        if EARLY:
            keys0 = tl.load(k_ptr + first_at, mask=first[:, None], other=0.0)  # [BLOCK_N, D]
            values0 = tl.load(v_ptr + first_at, mask=first[:, None], other=0.0)
        if PDL:
            gdc_wait()
            gdc_launch_dependents()
        if not EARLY:
            keys0 = tl.load(k_ptr + first_at, mask=first[:, None], other=0.0)
            values0 = tl.load(v_ptr + first_at, mask=first[:, None], other=0.0)
        src = qkv_ptr + b * s_qkv
        k_at = src + (HQ + kvh) * D
        k = norm_rope_values(tl.load(k_at + d)[None, :].to(tl.float32), tl.load(k_at + rot)[None, :].to(tl.float32),
                             kw, kwr, c, s, d[None, :], eps, D, dt)  # [1, D]
        v = tl.load(src + (HQ + HKV + kvh) * D + d)
        new_at = cache + pos * s_pos + d
        tl.store(k_ptr + new_at[None, :], k.to(dt))
        tl.store(v_ptr + new_at, v)
        g = tl.arange(0, GROUP_P)
        g_ok = g < GROUP
        heads = kvh * GROUP + g
        q_at = src + heads[:, None] * D
        q = norm_rope_values(tl.load(q_at + d[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32),
                             tl.load(q_at + rot[None, :], mask=g_ok[:, None], other=0.0).to(tl.float32),
                             qw, qwr, c, s, d[None, :], eps, D, dt)  # [GROUP_P, D], fp32 holding dt values
        # The new position first, from registers: the running max starts at its score.
        m = tl.sum(q * k, axis=1) * scale  # [GROUP_P]
        den = tl.full([GROUP_P], 1.0, tl.float32)
        acc = tl.zeros([GROUP_P, D], tl.float32) + v.to(tl.float32)[None, :]
        if not DOT_FP32:
            q = q.to(dt)
        m, den, acc = _attend_block(q, keys0, values0, first, m, den, acc, scale, DOT, DOT_FP32)
        for start in tl.range(BLOCK_N, pos, BLOCK_N, num_stages=STAGES):
            at = start + blk
            ok = at < pos
            kv_at = cache + at[:, None] * s_pos + d[None, :]
            keys = tl.load(k_ptr + kv_at, mask=ok[:, None], other=0.0)
            values = tl.load(v_ptr + kv_at, mask=ok[:, None], other=0.0)
            m, den, acc = _attend_block(q, keys, values, ok, m, den, acc, scale, DOT, DOT_FP32)
        out = round_to(acc / den[:, None], dt)
        tl.store(out_ptr + b * so_b + heads[:, None] * so_h + d[None, :], out.to(dt), mask=g_ok[:, None])


def decode_qk_attention(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps: float,
                        num_heads: int, num_kv_heads: int, *, pdl: bool = False, dot: bool = True,
                        early: bool = True, block_n: int = 64, num_warps: int = 4, stages: int = 1) -> torch.Tensor:
    """Triton when available (CUDA, or CPU tensors through the interpreter), else the reference. dot:
    the scores and the weighted values on the tensor cores (query heads padded to 16 rows), else fp32
    CUDA-core products. early: with pdl, the first block of earlier positions is read before the wait
    for the previous kernel (right where that kernel wrote no earlier position of these rows: the
    talker's qkv product). block_n: keys a block; stages: blocks of keys in flight (software pipelining of
    the loop over the blocks after the first)."""
    if not HAVE_TRITON:
        return decode_qk_attention_ref(qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, eps,
                                       num_heads, num_kv_heads)
    n, d = qkv.shape[0], q_norm.shape[0]
    if qkv.shape[1] != (num_heads + 2 * num_kv_heads) * d or qkv.stride(1) != 1:
        raise ValueError(f"qkv must be [N, (Hq + 2 Hkv) D] with unit column stride, got {tuple(qkv.shape)}")
    if k_cache.shape[1] != num_kv_heads or k_cache.shape[3] != d:
        raise ValueError(f"caches must be [R, {num_kv_heads}, L, {d}], got {tuple(k_cache.shape)}")
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1 or cos.stride() != (d, 1):
        raise ValueError("k/v caches must share strides with D contiguous; cos/sin must be contiguous [P, D]")
    if num_heads % num_kv_heads or d != next_pow2(d) or block_n != next_pow2(block_n):
        raise ValueError(f"need Hq a multiple of Hkv, a power-of-two head dim and block, got {num_heads}, "
                         f"{num_kv_heads}, {d}, {block_n}")
    if not (qkv.dtype == k_cache.dtype == cos.dtype == q_norm.dtype):
        raise ValueError("qkv, caches, RoPE tables and norm weights must share one dtype")
    if positions.shape != (n,) or rows.shape != (n,):
        raise ValueError(f"positions and rows must be [{n}], got {tuple(positions.shape)}, {tuple(rows.shape)}")
    group = num_heads // num_kv_heads
    out = torch.empty(n, num_heads, d, device=qkv.device, dtype=qkv.dtype)
    # An MMA needs >= 16 rows. fp32 caches keep fp32 products, and so do CPU runs: Triton's interpreter
    # multiplies the bit patterns of bf16 operands in tl.dot (Triton 3.9).
    dot_fp32 = dot and (qkv.dtype == torch.float32 or qkv.device.type == "cpu")
    _decode_qk_attention_kernel[(n, num_kv_heads)](
        qkv, q_norm, k_norm, cos, sin, positions, rows, k_cache, v_cache, out, eps, LOG2E / math.sqrt(d),
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1),
        HQ=num_heads, HKV=num_kv_heads, GROUP=group, GROUP_P=max(16, next_pow2(group)) if dot else next_pow2(group),
        D=d, BLOCK_N=block_n, DOT=dot, DOT_FP32=dot_fp32, EARLY=early and pdl, STAGES=stages, PDL=pdl,
        num_warps=num_warps,
        **pdl_launch(pdl))
    return out
