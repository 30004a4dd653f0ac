"""Decode attention over a slot-indexed KV cache: one query position per row, GQA, split over keys.

    q        [B, Hq, D]            this step's queries (RoPE applied)
    k_cache  [N, Hkv, L, D]        N cache rows (request slots)
    v_cache  [N, Hkv, L, D]
    rows     [B] int64             which cache row each query reads
    lengths  [B] int64             valid positions of that row (keys 0 .. length-1), 1 <= length <= L
    -> out   [B, Hq, D]

`decode_attention_ref` is the plain torch definition; the Triton kernel must equal it (tests run
it on CPU through the interpreter).

Split-KV: one program per (row, kv head) over the whole row would be 8 programs on a 132-SM GPU at
batch 1, each streaming up to L keys serially. Instead the keys of a row are cut into `splits`
chunks (more at small batch, one at large batch; the chunk count is a function of the static
shapes, so one CUDA graph serves any lengths): a program per (row, kv head, chunk) handles all the
head's GROUP query heads at once (each K/V block is read once) and writes an unnormalised partial
(acc, max, sum) that a second kernel merges. Chunks past a row's length exit at once. With one
chunk the first kernel writes the output itself. Both products run on the tensor cores (tl.dot):
with fp32 broadcast-multiply-reduce products the arithmetic, not the memory system, sets the pace
once the grid is full (26 % of bandwidth at batch 64).
"""

from __future__ import annotations

import math

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to
else:
    triton = None

LOG2E = 1.4426950408889634


def decode_attention_ref(q, k_cache, v_cache, rows, lengths) -> torch.Tensor:
    hq = q.shape[1]
    hkv, max_len = k_cache.shape[1], k_cache.shape[2]
    k = k_cache[rows].repeat_interleave(hq // hkv, dim=1)  # [B, Hq, L, D]
    v = v_cache[rows].repeat_interleave(hq // hkv, dim=1)
    valid = torch.arange(max_len, device=q.device)[None] < lengths[:, None]  # [B, L]
    out = torch.nn.functional.scaled_dot_product_attention(q[:, :, None], k, v, attn_mask=valid[:, None, None])
    return out[:, :, 0]


def num_splits(batch: int, num_kv_heads: int, max_len: int, block_n: int, target_programs: int = 1024) -> int:
    """Key chunks per row: enough (row, head, chunk) programs to fill the GPU, chunks >= block_n."""
    cap = max(1, min(target_programs // (batch * num_kv_heads), max_len // block_n))
    return 1 << (cap.bit_length() - 1)  # the largest power of two <= cap


if HAVE_TRITON:

    # Both products on the tensor cores (tl.dot), the GROUP query heads padded to the 16 rows an MMA needs.
    @triton.jit
    def _decode_attention_split_dot_kernel(q_ptr, k_ptr, v_ptr, rows_ptr, len_ptr, out_ptr, acc_ptr, ml_ptr,
                                           sq_b, sq_h, sk_n, sk_h, sk_l, so_b, so_h, scale,
                                           GROUP: tl.constexpr, GROUP_P: tl.constexpr, D: tl.constexpr,
                                           BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, SPLITS: tl.constexpr,
                                           HQ: tl.constexpr, DOT_FP32: tl.constexpr, PDL: tl.constexpr):
        pdl_start(PDL)
        b = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1)
        split = tl.program_id(2)
        n = tl.load(len_ptr + b)
        start = split * CHUNK
        row = tl.load(rows_ptr + b, mask=start < n, other=0)
        d = tl.arange(0, D)
        base = row * sk_n + kvh * sk_h
        end = tl.minimum(start + CHUNK, n)
        if start < n:
            g = tl.arange(0, GROUP_P)
            g_ok = g < GROUP
            heads = kvh * GROUP + g
            q = tl.load(q_ptr + b * sq_b + heads[:, None] * sq_h + d[None, :], mask=g_ok[:, None], other=0.0)
            if DOT_FP32:
                q = q.to(tl.float32)
            m = tl.full([GROUP_P], float("-inf"), tl.float32)
            den = tl.zeros([GROUP_P], tl.float32)
            acc = tl.zeros([GROUP_P, D], tl.float32)
            for blk in range(start, end, BLOCK_N):
                pos = blk + tl.arange(0, BLOCK_N)
                ok = pos < end
                kv_off = base + pos[:, None] * sk_l + d[None, :]
                k = tl.load(k_ptr + kv_off, mask=ok[:, None], other=0.0)  # [BLOCK_N, D], model dtype
                v = tl.load(v_ptr + kv_off, mask=ok[:, None], other=0.0)
                if DOT_FP32:
                    k = k.to(tl.float32)
                    v = v.to(tl.float32)
                s = tl.dot(q, tl.trans(k), input_precision="ieee" if DOT_FP32 else "tf32") * scale  # [GROUP_P, BLOCK_N]
                s = tl.where(ok[None, :], s, float("-inf"))
                m_new = tl.maximum(m, tl.max(s, axis=1))
                p = tl.exp2(s - m_new[:, None])
                alpha = tl.exp2(m - m_new)
                den = den * alpha + tl.sum(p, axis=1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee" if DOT_FP32 else "tf32")
                m = m_new
            if SPLITS == 1:
                dt = out_ptr.dtype.element_ty
                out = round_to(acc / den[:, None], dt)
                tl.store(out_ptr + b * so_b + heads[:, None] * so_h + d[None, :], out.to(dt), mask=g_ok[:, None])
            else:
                part = (b * HQ + heads) * SPLITS + split
                tl.store(acc_ptr + part[:, None] * D + d[None, :], acc, mask=g_ok[:, None])
                tl.store(ml_ptr + part * 2, m, mask=g_ok)
                tl.store(ml_ptr + part * 2 + 1, den, mask=g_ok)

    @triton.jit
    def _decode_attention_merge_kernel(len_ptr, out_ptr, acc_ptr, ml_ptr, so_b, so_h,
                      D: tl.constexpr, CHUNK: tl.constexpr, SPLITS: tl.constexpr, HQ: tl.constexpr,
                      PDL: tl.constexpr):
        pdl_start(PDL)
        b = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        n = tl.load(len_ptr + b)
        sp = tl.arange(0, SPLITS)
        live = sp * CHUNK < n
        part = (b * HQ + h) * SPLITS + sp
        m = tl.load(ml_ptr + part * 2, mask=live, other=float("-inf"))
        den = tl.load(ml_ptr + part * 2 + 1, mask=live, other=0.0)
        w = tl.where(live, tl.exp2(m - tl.max(m, axis=0)), 0.0)
        d = tl.arange(0, D)
        acc = tl.load(acc_ptr + part[:, None] * D + d[None, :], mask=live[:, None], other=0.0)
        dt = out_ptr.dtype.element_ty
        out = round_to(tl.sum(w[:, None] * acc, axis=0) / tl.sum(w * den, axis=0), dt)
        tl.store(out_ptr + b * so_b + h * so_h + d, out.to(dt))


def decode_attention(q, k_cache, v_cache, rows, lengths, *, block_n: int = 64, splits: int | None = None,
                     pdl: bool = False) -> torch.Tensor:
    """Triton kernels when available (CUDA, or CPU tensors through the interpreter). splits: key chunks a
    row (None: `num_splits`). pdl: both kernels launched with programmatic dependent launch
    (`backend.pdl_supported`): each program waits for the previous kernel's writes before it reads them."""
    if not HAVE_TRITON:
        return decode_attention_ref(q, k_cache, v_cache, rows, lengths)
    b, hq, d = q.shape
    hkv, max_len = k_cache.shape[1], k_cache.shape[2]
    if k_cache.stride() != v_cache.stride() or k_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("decode_attention needs k/v caches of one layout with the head dimension contiguous")
    if hq % hkv or d != next_pow2(d):
        raise ValueError(f"need Hq a multiple of Hkv and a power-of-two head dim, got {hq}, {hkv}, {d}")
    if d < 16 or q.dtype != k_cache.dtype:
        raise ValueError(f"decode_attention needs a head dim >= 16 and q in the cache dtype, got {d}, {q.dtype}")
    group = hq // hkv
    if splits is None:  # from the batch rounded up to a power of two: eager runs split as their graph bucket does
        splits = num_splits(next_pow2(b), hkv, max_len, block_n)
    chunk = triton.cdiv(triton.cdiv(max_len, splits), block_n) * block_n
    out = torch.empty_like(q)
    if splits > 1:
        acc = torch.empty(b, hq, splits, d, device=q.device, dtype=torch.float32)
        ml = torch.empty(b, hq, splits, 2, device=q.device, dtype=torch.float32)
    else:
        acc = ml = out  # unused
    args = (q, k_cache, v_cache, rows, lengths, out, acc, ml,
            q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            out.stride(0), out.stride(1), LOG2E / math.sqrt(d))
    shape = dict(GROUP=group, D=d, BLOCK_N=block_n, CHUNK=chunk, SPLITS=splits, HQ=hq, PDL=pdl, num_warps=4,
                 **pdl_launch(pdl))
    # fp32 caches keep full fp32 products; so do CPU runs, because Triton's interpreter multiplies the bit
    # patterns of bf16 operands in tl.dot (Triton 3.9).
    dot_fp32 = q.dtype == torch.float32 or q.device.type == "cpu"
    _decode_attention_split_dot_kernel[(b, hkv, splits)](*args, GROUP_P=max(16, next_pow2(group)), DOT_FP32=dot_fp32,
                                                         **shape)
    if splits > 1:
        _decode_attention_merge_kernel[(b, hq)](lengths, out, acc, ml, out.stride(0), out.stride(1),
                                                D=d, CHUNK=chunk, SPLITS=splits, HQ=hq, PDL=pdl, num_warps=4,
                                                **pdl_launch(pdl))
    return out
