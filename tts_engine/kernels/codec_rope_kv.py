"""The codec window transformer's RoPE and K/V window in one launch a layer, where torch takes nine
(RoPE's negation, concatenation, two products and sum; the keys' and values' concatenations with the
window and their copies back). At a one-frame chunk every one of them is a few microseconds of launch.

    qkv            [B, t, (H + 2 Hkv) D]   a layer's fused projection of t new frames (row stride free)
    cos, sin       [B, 1, t, D]            RoPE at each row's positions, the model's dtype
    k_win, v_win   [B, Hkv, S, D]          the S keys / values before these frames (D contiguous; the
                                           batch stride is free: rows of the codec runner's state);
                                           updated in place to the last S of window + new frames
    -> q [B, H, t, D], k, v [B, Hkv, S + t, D]: what attention reads, the window then the new frames

Rounding is the reference's (`codec_rope_kv_ref`, the codec's torch path): each RoPE product and their
sum rounded to the model's dtype. One program per (row, head); a k/v head's program loads its whole
window and writes it into k / v before a block barrier, then stores the shifted window, so no thread
reads a window row another has already overwritten.
"""

from __future__ import annotations

import torch

from .backend import HAVE_TRITON, next_pow2
from .qk_norm_rope import rotate_half

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import round_to


def codec_rope_kv_ref(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_win: torch.Tensor | None,
                      v_win: torch.Tensor | None, num_heads: int, num_kv_heads: int):
    """The codec's torch path (and the kernel's reference); without windows (a whole-sequence decode)
    k and v are the new frames' alone."""
    b, t, _ = qkv.shape
    d = cos.shape[-1]
    heads = qkv.view(b, t, num_heads + 2 * num_kv_heads, d).transpose(1, 2)  # [B, H + 2 Hkv, t, D]
    x = heads[:, :num_heads + num_kv_heads]
    qk = x * cos + rotate_half(x) * sin
    q, k, v = qk[:, :num_heads], qk[:, num_heads:], heads[:, num_heads + num_kv_heads:]
    if k_win is not None:
        k = torch.cat([k_win, k], dim=2)
        v = torch.cat([v_win, v], dim=2)
        k_win.copy_(k[:, :, -k_win.shape[2]:])
        v_win.copy_(v[:, :, -v_win.shape[2]:])
    return q, k, v


if HAVE_TRITON:

    @triton.jit
    def _window(win, out, y, s_win_s, T, S, D: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr):
        """out [S + T, D] = the window [S, D] then y [BLOCK_T, D] (rows < T); then the window, in place,
        = the last S rows of out."""
        d = tl.arange(0, D)[None, :]
        j = tl.arange(0, BLOCK_S)[:, None]
        i = tl.arange(0, BLOCK_T)[:, None]
        old = j < S
        w = tl.load(win + j * s_win_s + d, mask=old, other=0.0)
        tl.store(out + j * D + d, w, mask=old)
        tl.store(out + (S + i) * D + d, y, mask=i < T)
        tl.debug_barrier()  # every window row is read (and written above) before any is overwritten
        tl.store(win + (j - T) * s_win_s + d, w, mask=old & (j >= T))
        tl.store(win + (S - T + i) * s_win_s + d, y, mask=(i < T) & (i >= T - S))

    @triton.jit
    def _codec_rope_kv_kernel(qkv_ptr, cos_ptr, sin_ptr, kw_ptr, vw_ptr, q_ptr, k_ptr, v_ptr,
                              s_qkv_b, s_qkv_t, s_cs_b, s_cs_t, s_win_b, s_win_h, s_win_s, T, S,
                              H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                              BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        half = D // 2
        d = tl.arange(0, D)[None, :]
        i = tl.arange(0, BLOCK_T)[:, None]  # the new frames
        new = i < T
        dt = qkv_ptr.dtype.element_ty
        src = qkv_ptr + row * s_qkv_b + i * s_qkv_t
        if head < H + HKV:  # a q or k head: rotated
            rot = tl.where(d < half, d + half, d - half)  # the element rotate_half brings to d
            sign = tl.where(d < half, -1.0, 1.0)
            c = tl.load(cos_ptr + row * s_cs_b + i * s_cs_t + d, mask=new, other=0.0).to(tl.float32)
            s = tl.load(sin_ptr + row * s_cs_b + i * s_cs_t + d, mask=new, other=0.0).to(tl.float32)
            x = tl.load(src + head * D + d, mask=new, other=0.0).to(tl.float32)
            xr = tl.load(src + head * D + rot, mask=new, other=0.0).to(tl.float32)
            y = round_to(round_to(x * c, dt) + round_to(sign * xr * s, dt), dt).to(dt)
            if head < H:
                tl.store(q_ptr + ((row * H + head) * T + i) * D + d, y, mask=new)
            else:
                kvh = head - H
                _window(kw_ptr + row * s_win_b + kvh * s_win_h, k_ptr + (row * HKV + kvh) * (S + T) * D, y,
                        s_win_s, T, S, D, BLOCK_T, BLOCK_S)
        else:
            kvh = head - H - HKV
            y = tl.load(src + (H + HKV + kvh) * D + d, mask=new, other=0.0)
            _window(vw_ptr + row * s_win_b + kvh * s_win_h, v_ptr + (row * HKV + kvh) * (S + T) * D, y,
                    s_win_s, T, S, D, BLOCK_T, BLOCK_S)


def codec_rope_kv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_win: torch.Tensor,
                  v_win: torch.Tensor, num_heads: int, num_kv_heads: int):
    if not HAVE_TRITON:
        return codec_rope_kv_ref(qkv, cos, sin, k_win, v_win, num_heads, num_kv_heads)
    b, t, width = qkv.shape
    d, s = cos.shape[-1], k_win.shape[2]
    if width != (num_heads + 2 * num_kv_heads) * d or qkv.stride(2) != 1 or d != next_pow2(d):
        raise ValueError(f"qkv must be [B, t, (H + 2 Hkv) D] with D a power of 2 and unit column stride, "
                         f"got {tuple(qkv.shape)}")
    if cos.shape != (b, 1, t, d) or cos.stride() != sin.stride() or cos.stride(3) != 1:
        raise ValueError(f"cos/sin must be [B, 1, t, D] with D contiguous, got {tuple(cos.shape)}")
    if k_win.shape != (b, num_kv_heads, s, d) or k_win.stride() != v_win.stride() or k_win.stride(3) != 1:
        raise ValueError(f"the K/V windows must be [B, Hkv, S, D] sharing strides, got {tuple(k_win.shape)}")
    if not (qkv.dtype == cos.dtype == sin.dtype == k_win.dtype == v_win.dtype):
        raise ValueError("qkv, cos/sin and the K/V windows must share one dtype")
    q = torch.empty(b, num_heads, t, d, device=qkv.device, dtype=qkv.dtype)
    k = torch.empty(b, num_kv_heads, s + t, d, device=qkv.device, dtype=qkv.dtype)
    v = torch.empty_like(k)
    _codec_rope_kv_kernel[(b, num_heads + 2 * num_kv_heads)](
        qkv, cos, sin, k_win, v_win, q, k, v, qkv.stride(0), qkv.stride(1), cos.stride(0), cos.stride(2),
        k_win.stride(0), k_win.stride(1), k_win.stride(2), t, s,
        H=num_heads, HKV=num_kv_heads, D=d, BLOCK_T=next_pow2(t), BLOCK_S=next_pow2(s), num_warps=4)
    return q, k, v
