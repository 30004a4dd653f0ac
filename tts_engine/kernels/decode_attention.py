"""Decode attention over a slot-indexed KV cache: one query position per row, GQA.

    q        [B, Hq, D]            this step's queries (RoPE applied)
    k_cache  [N, Hkv, L, D]        N cache rows (request slots, or CP batch rows)
    v_cache  [N, Hkv, L, D]
    rows     [B] int64             which cache row each query reads
    lengths  [B] int64             valid positions of that row (keys 0 .. length-1)
    -> out   [B, Hq, D]

Used by the talker (rows = request slots, lengths up to the context limit) and by the code
predictor (rows = batch rows, lengths 2..16). `decode_attention_ref` is the plain torch
definition; the Triton kernel must equal it (tests run it under TRITON_INTERPRET=1 on CPU).
One program per (query row, kv head) streams the row's keys in blocks with an online softmax, so
the cost follows the row's own length, not the cache size.
"""

from __future__ import annotations

import math

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without triton use the reference
    triton = None


def decode_attention_ref(q, k_cache, v_cache, rows, lengths) -> torch.Tensor:
    hq = q.shape[1]
    hkv, max_len = k_cache.shape[1], k_cache.shape[2]
    k = k_cache[rows].repeat_interleave(hq // hkv, dim=1)  # [B, Hq, L, D]
    v = v_cache[rows].repeat_interleave(hq // hkv, dim=1)
    valid = torch.arange(max_len, device=q.device)[None] < lengths[:, None]  # [B, L]
    out = torch.nn.functional.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=valid[:, None, None])
    return out[:, :, 0]


if triton is not None:

    @triton.jit
    def _decode_attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, rows_ptr, len_ptr,
                                 sq_b, sq_h, sk_n, sk_h, sk_l, so_b, so_h, scale,
                                 GROUP: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
        b = tl.program_id(0)
        kvh = tl.program_id(1)
        row = tl.load(rows_ptr + b)
        n = tl.load(len_ptr + b)
        g = tl.arange(0, GROUP)
        d = tl.arange(0, D)
        q = tl.load(q_ptr + b * sq_b + (kvh * GROUP + g)[:, None] * sq_h + d[None, :]).to(tl.float32)
        m = tl.full([GROUP], float("-inf"), tl.float32)
        den = tl.zeros([GROUP], tl.float32)
        acc = tl.zeros([GROUP, D], tl.float32)
        base = row * sk_n + kvh * sk_h
        for start in range(0, n, BLOCK_N):
            pos = start + tl.arange(0, BLOCK_N)
            ok = pos < n
            kv_off = base + pos[:, None] * sk_l + d[None, :]
            k = tl.load(k_ptr + kv_off, mask=ok[:, None], other=0.0).to(tl.float32)  # [BLOCK_N, D]
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale  # [GROUP, BLOCK_N]
            s = tl.where(ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            v = tl.load(v_ptr + kv_off, mask=ok[:, None], other=0.0).to(tl.float32)
            den = den * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            m = m_new
        out = acc / den[:, None]
        tl.store(out_ptr + b * so_b + (kvh * GROUP + g)[:, None] * so_h + d[None, :],
                 out.to(out_ptr.dtype.element_ty))


def decode_attention(q, k_cache, v_cache, rows, lengths, *, block_n: int = 32) -> torch.Tensor:
    """Triton kernel when available (CUDA, or CPU tensors under TRITON_INTERPRET=1)."""
    if triton is None:
        return decode_attention_ref(q, k_cache, v_cache, rows, lengths)
    b, hq, d = q.shape
    hkv = k_cache.shape[1]
    if k_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("decode_attention needs the head dimension contiguous")
    out = torch.empty_like(q)
    _decode_attention_kernel[(b, hkv)](
        q, k_cache, v_cache, out, rows, lengths,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        out.stride(0), out.stride(1), 1.0 / math.sqrt(d),
        GROUP=hq // hkv, D=d, BLOCK_N=block_n)
    return out
