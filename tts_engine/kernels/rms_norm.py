"""RMSNorm over the last dimension, alone or fused with the residual add before it.

    rms_norm(x, weight, eps)                 x [..., H], weight [H] -> out [..., H]
    add_rms_norm(x, delta, weight, eps)      x, delta [..., H] -> (x + delta [..., H], its norm [..., H])

Rounding is the reference's (`model/layers.RMSNorm`): normalise in fp32, cast to the input dtype,
then multiply by the weight in the input dtype; the residual add rounds to the input dtype before
the norm reads it, as `x = x + f(x)` does in torch. One program per row; the row sits in registers.
"""

from __future__ import annotations

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def add_rms_norm_ref(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    s = x + delta
    return s, rms_norm_ref(s, weight, eps)


if HAVE_TRITON:

    @triton.jit
    def _rms_norm_kernel(x_ptr, d_ptr, w_ptr, sum_ptr, out_ptr, n_cols, eps,
                         HAS_DELTA: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        off = row * n_cols + cols
        dt = x_ptr.dtype.element_ty
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)  # a constant: before the wait
        pdl_start(PDL)
        h = tl.load(x_ptr + off, mask=ok, other=0.0).to(tl.float32)
        if HAS_DELTA:
            h = round_to(h + tl.load(d_ptr + off, mask=ok, other=0.0).to(tl.float32), dt)
            tl.store(sum_ptr + off, h.to(dt), mask=ok)
        r = tl.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps)
        y = round_to(w * round_to(h * r, dt), dt)
        tl.store(out_ptr + off, y.to(dt), mask=ok)


def _launch(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float, pdl: bool = False):
    if x.dtype != weight.dtype or (delta is not None and delta.dtype != x.dtype):
        raise ValueError(f"rms_norm needs one dtype, got x {x.dtype}, weight {weight.dtype}")
    h = x.shape[-1]
    x2 = x.reshape(-1, h).contiguous()  # [rows, H]
    d2 = x2 if delta is None else delta.reshape(-1, h).contiguous()
    out = torch.empty_like(x2)
    total = torch.empty_like(x2) if delta is not None else out
    block = next_pow2(h)
    _rms_norm_kernel[(x2.shape[0],)](x2, d2, weight, total, out, h, eps, HAS_DELTA=delta is not None,
                                     BLOCK=block, PDL=pdl, num_warps=max(1, min(8, block // 256)), **pdl_launch(pdl))
    return total.view(x.shape), out.view(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, pdl: bool = False) -> torch.Tensor:
    """pdl: launched with programmatic dependent launch (`backend.pdl_supported`; the weight is read
    before the wait for the previous kernel, x after)."""
    if not HAVE_TRITON:
        return rms_norm_ref(x, weight, eps)
    return _launch(x, None, weight, eps, pdl)[1]


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (x + delta, rms_norm(x + delta)); both [..., H] in x's dtype."""
    if not HAVE_TRITON:
        return add_rms_norm_ref(x, delta, weight, eps)
    return _launch(x, delta, weight, eps)
