"""SnakeBeta activation of the codec's decoder blocks, one pass over the activations.

    x [B, C, T], alpha [C], beta [C] (stored as logs) -> x + sin^2(x * e^alpha) / (e^beta + 1e-9)

The torch form (`snake_beta_ref`, the model's reference numerics) is ~9 kernels, five of them over
the whole [B, C, T] tensor; in the codec's incremental chunk they were ~40 % of the GPU time
(a profile of one). The kernel reads x once and writes y once, in fp32 inside,
rounding once to x's dtype (the reference rounds after each op: equal in fp32 up to the
implementation of sin, within bf16 rounding otherwise).

`bias` [C]: the activation of x + bias, for a conv run without its bias (cuDNN convs add it in a
broadcast kernel of their own): the sum is rounded to x's dtype first, as the conv's output is.
`residual_bias_add(x, y, bias)` = x + (y + bias), the residual add after such a conv, rounded the same
way: one kernel instead of two.

Either layout of x [B, C, T]: channels-first (contiguous) or channels-last (`x.transpose(1, 2)` contiguous,
as the codec's channels-last fast path keeps its decoder blocks); the output has x's layout.
"""

from __future__ import annotations

import torch

from .backend import HAVE_TRITON, next_pow2

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import round_to


def snake_beta_ref(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    if bias is not None:
        x = x + bias[None, :, None]
    freq = alpha.exp()[None, :, None]  # [1, C, 1]
    # The 1e-9 guard is part of the reference numerics (it matters in bf16 only in theory).
    inv_mag = 1.0 / (beta.exp()[None, :, None] + 1e-9)
    return x + inv_mag * torch.sin(x * freq).pow(2)


def residual_bias_add_ref(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return x + (y + bias[None, :, None])


if HAVE_TRITON:

    @triton.jit
    def _snake_beta_kernel(x_ptr, alpha_ptr, beta_ptr, bias_ptr, out_ptr, channels, length,
                           HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)  # b * C + c
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < length
        c = row % channels
        freq = tl.exp(tl.load(alpha_ptr + c).to(tl.float32))
        inv_mag = 1.0 / (tl.exp(tl.load(beta_ptr + c).to(tl.float32)) + 1e-9)
        x = tl.load(x_ptr + row * length + cols, mask=ok, other=0.0)
        xf = x.to(tl.float32)
        if HAS_BIAS:
            xf = round_to(xf + tl.load(bias_ptr + c).to(tl.float32), x.dtype)
        s = tl.sin(xf * freq)
        # round_to before the cast: the interpreter's cast truncates (the GPU's rounds to nearest even)
        tl.store(out_ptr + row * length + cols, round_to(xf + inv_mag * (s * s), x.dtype).to(x.dtype), mask=ok)

    @triton.jit
    def _residual_bias_add_kernel(x_ptr, y_ptr, bias_ptr, out_ptr, channels, length, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)  # b * C + c
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < length
        x = tl.load(x_ptr + row * length + cols, mask=ok, other=0.0)
        y = tl.load(y_ptr + row * length + cols, mask=ok, other=0.0).to(tl.float32)
        y = round_to(y + tl.load(bias_ptr + row % channels).to(tl.float32), x.dtype)
        tl.store(out_ptr + row * length + cols, round_to(x.to(tl.float32) + y, x.dtype).to(x.dtype), mask=ok)

    @triton.jit
    def _snake_beta_cl_kernel(x_ptr, alpha_ptr, beta_ptr, bias_ptr, out_ptr, channels, n,
                              HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # element of [B, T, C] memory
        ok = i < n
        c = i % channels
        freq = tl.exp(tl.load(alpha_ptr + c, mask=ok, other=0.0).to(tl.float32))
        inv_mag = 1.0 / (tl.exp(tl.load(beta_ptr + c, mask=ok, other=0.0).to(tl.float32)) + 1e-9)
        x = tl.load(x_ptr + i, mask=ok, other=0.0)
        xf = x.to(tl.float32)
        if HAS_BIAS:
            xf = round_to(xf + tl.load(bias_ptr + c, mask=ok, other=0.0).to(tl.float32), x.dtype)
        s = tl.sin(xf * freq)
        tl.store(out_ptr + i, round_to(xf + inv_mag * (s * s), x.dtype).to(x.dtype), mask=ok)

    @triton.jit
    def _residual_bias_add_cl_kernel(x_ptr, y_ptr, bias_ptr, out_ptr, channels, n, BLOCK: tl.constexpr):
        i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        ok = i < n
        x = tl.load(x_ptr + i, mask=ok, other=0.0)
        y = tl.load(y_ptr + i, mask=ok, other=0.0).to(tl.float32)
        y = round_to(y + tl.load(bias_ptr + i % channels, mask=ok, other=0.0).to(tl.float32), x.dtype)
        tl.store(out_ptr + i, round_to(x.to(tl.float32) + y, x.dtype).to(x.dtype), mask=ok)


def channels_last(x: torch.Tensor) -> bool:
    """Is x [B, C, T] laid out channels-last (x.transpose(1, 2) contiguous) and not also channels-first?"""
    return x.dim() == 3 and x.shape[1] > 1 and x.shape[2] > 1 and x.transpose(1, 2).is_contiguous()


def as_channels_last(x: torch.Tensor) -> torch.Tensor:
    """x [B, C, T] with channels-last memory (a copy unless it has it already)."""
    return x if channels_last(x) else x.transpose(1, 2).contiguous().transpose(1, 2)


_CL_BLOCK = 1024  # elements a program of the channels-last kernels


def _check(x: torch.Tensor, channels: int, *vectors: torch.Tensor | None) -> None:
    if x.dim() != 3 or x.shape[1] != channels or any(v is not None and v.numel() != channels for v in vectors):
        raise ValueError(f"x must be [B, C, T] with C = {channels} channels, got {tuple(x.shape)}")


def _grid(x: torch.Tensor) -> tuple[tuple[int, int], int]:
    b, c, t = x.shape
    block = min(1024, max(16, next_pow2(t)))
    return (b * c, triton.cdiv(t, block)), block


def snake_beta(x: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [B, C, T] -> SnakeBeta(x [+ bias]), one kernel (the torch reference without Triton)."""
    if not HAVE_TRITON:
        return snake_beta_ref(x, alpha, beta, bias)
    _check(x, alpha.numel(), beta, bias)
    if channels_last(x):
        out = torch.empty_like(x)  # the same strides
        _snake_beta_cl_kernel[(triton.cdiv(x.numel(), _CL_BLOCK),)](
            x, alpha, beta, x if bias is None else bias, out, x.shape[1], x.numel(),
            HAS_BIAS=bias is not None, BLOCK=_CL_BLOCK, num_warps=4)
        return out
    x = x.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    grid, block = _grid(x)
    _snake_beta_kernel[grid](x, alpha, beta, x if bias is None else bias, out, x.shape[1], x.shape[2],
                             HAS_BIAS=bias is not None, BLOCK=block, num_warps=4)
    return out


def residual_bias_add(x: torch.Tensor, y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x, y [B, C, T], bias [C] -> x + (y + bias), one kernel (the torch reference without Triton)."""
    if not HAVE_TRITON:
        return residual_bias_add_ref(x, y, bias)
    _check(x, bias.numel())
    if y.shape != x.shape or y.dtype != x.dtype:
        raise ValueError(f"y must match x {tuple(x.shape)} {x.dtype}, got {tuple(y.shape)} {y.dtype}")
    if channels_last(x):
        y = as_channels_last(y)
        out = torch.empty_like(x)
        _residual_bias_add_cl_kernel[(triton.cdiv(x.numel(), _CL_BLOCK),)](
            x, y, bias, out, x.shape[1], x.numel(), BLOCK=_CL_BLOCK, num_warps=4)
        return out
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    grid, block = _grid(x)
    _residual_bias_add_kernel[grid](x, y, bias, out, x.shape[1], x.shape[2], BLOCK=block, num_warps=4)
    return out
