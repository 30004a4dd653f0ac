"""SnakeBeta activation of the codec's decoder blocks, one pass over the activations.

    x [B, C, T], alpha [C], beta [C] (stored as logs) -> x + sin^2(x * e^alpha) / (e^beta + 1e-9)

The torch form (`snake_beta_ref`, the model's reference numerics) is ~9 kernels, five of them over
the whole [B, C, T] tensor; in the codec's incremental chunk they were ~40 % of the GPU time
(profile in docs/benchmarks.md). The kernel reads x once and writes y once, in fp32 inside,
rounding once to x's dtype (the reference rounds after each op: equal in fp32 up to the
implementation of sin, within bf16 rounding otherwise).
"""

from __future__ import annotations

import torch

from .backend import HAVE_TRITON, next_pow2

if HAVE_TRITON:
    import triton
    import triton.language as tl


def snake_beta_ref(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    freq = alpha.exp()[None, :, None]  # [1, C, 1]
    # The 1e-9 guard is part of the reference numerics (it matters in bf16 only in theory).
    inv_mag = 1.0 / (beta.exp()[None, :, None] + 1e-9)
    return x + inv_mag * torch.sin(x * freq).pow(2)


if HAVE_TRITON:

    @triton.jit
    def _snake_beta_kernel(x_ptr, alpha_ptr, beta_ptr, out_ptr, channels, length, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)  # b * C + c
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < length
        c = row % channels
        freq = tl.exp(tl.load(alpha_ptr + c).to(tl.float32))
        inv_mag = 1.0 / (tl.exp(tl.load(beta_ptr + c).to(tl.float32)) + 1e-9)
        x = tl.load(x_ptr + row * length + cols, mask=ok, other=0.0)
        xf = x.to(tl.float32)
        s = tl.sin(xf * freq)
        tl.store(out_ptr + row * length + cols, (xf + inv_mag * (s * s)).to(x.dtype), mask=ok)


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """x [B, C, T] -> SnakeBeta(x), one kernel (the torch reference without Triton)."""
    if not HAVE_TRITON:
        return snake_beta_ref(x, alpha, beta)
    if x.dim() != 3 or x.shape[1] != alpha.numel() or beta.numel() != alpha.numel():
        raise ValueError(f"x must be [B, C, T] with C = {alpha.numel()} channels, got {tuple(x.shape)}")
    x = x.contiguous()
    b, c, t = x.shape
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    block = min(1024, max(16, next_pow2(t)))
    _snake_beta_kernel[(b * c, triton.cdiv(t, block))](x, alpha, beta, out, c, t, BLOCK=block, num_warps=4)
    return out
