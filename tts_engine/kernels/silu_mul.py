"""SwiGLU activation on the fused gate/up projection.

    gate_up [N, 2 I]  (gate columns first, then up) -> silu(gate) * up  [N, I]
    silu_mul_of_partials(parts [S, N, 2 I] fp32, dtype) -> the same of their sum rounded to dtype

Rounding is the reference's `F.silu(gate) * up`: silu in fp32 rounded to the input dtype, then
the product rounded again. `parts` are the gate/up product's split-K partials
(kernels/rms_norm.py `split_k_partials`), summed here in order and rounded once, as `F.linear` rounds its
fp32 sum, in place of the reduce launch cuBLAS would make after a split-K product.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .backend import HAVE_TRITON
from .rms_norm import partials_sum_ref

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import round_to


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


if HAVE_TRITON:

    @triton.jit
    def _silu_mul_kernel(gu_ptr, out_ptr, inter, s_gu, s_part, PARTS: tl.constexpr, BLOCK: tl.constexpr):
        """PARTS > 0: gu_ptr holds that many fp32 partial sums of gate/up, s_part elements apart."""
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < inter
        dt = out_ptr.dtype.element_ty
        if PARTS > 0:
            g = tl.zeros((BLOCK,), dtype=tl.float32)
            u = tl.zeros((BLOCK,), dtype=tl.float32)
            for p in tl.static_range(PARTS):
                g += tl.load(gu_ptr + p * s_part + row * s_gu + cols, mask=ok, other=0.0)
                u += tl.load(gu_ptr + p * s_part + row * s_gu + inter + cols, mask=ok, other=0.0)
            g, u = round_to(g, dt), round_to(u, dt)
        else:
            g = tl.load(gu_ptr + row * s_gu + cols, mask=ok, other=0.0).to(tl.float32)
            u = tl.load(gu_ptr + row * s_gu + inter + cols, mask=ok, other=0.0).to(tl.float32)
        act = round_to(g / (1.0 + tl.exp(-g)), dt)
        tl.store(out_ptr + row * inter + cols, round_to(act * u, dt).to(dt), mask=ok)


def silu_mul(gate_up: torch.Tensor, *, block: int = 1024) -> torch.Tensor:
    if not HAVE_TRITON:
        return silu_mul_ref(gate_up)
    two_i = gate_up.shape[-1]
    if two_i % 2:
        raise ValueError(f"gate_up needs an even last dimension, got {two_i}")
    gu = gate_up.reshape(-1, two_i)
    if gu.stride(-1) != 1:
        gu = gu.contiguous()
    inter = two_i // 2
    out = torch.empty(gu.shape[0], inter, device=gu.device, dtype=gu.dtype)
    _silu_mul_kernel[(gu.shape[0], triton.cdiv(inter, block))](gu, out, inter, gu.stride(0), 0, PARTS=0, BLOCK=block,
                                                                num_warps=4)
    return out.view(*gate_up.shape[:-1], inter)


def silu_mul_of_partials(parts: torch.Tensor, dtype: torch.dtype, *, block: int = 1024) -> torch.Tensor:
    """parts [S, N, 2 I] fp32, the gate/up product's split-K partials -> silu(gate) * up [N, I] in dtype, of their
    sum rounded to dtype (`partials_sum_ref`)."""
    if parts.dim() != 3 or parts.dtype != torch.float32 or parts.shape[-1] % 2:
        raise ValueError(f"silu_mul_of_partials takes fp32 partials [S, N, 2 I], got {parts.dtype} "
                         f"{tuple(parts.shape)}")
    if not HAVE_TRITON:
        return silu_mul_ref(partials_sum_ref(parts, dtype))
    parts = parts.contiguous()
    s, n, two_i = parts.shape
    out = torch.empty(n, two_i // 2, device=parts.device, dtype=dtype)
    _silu_mul_kernel[(n, triton.cdiv(two_i // 2, block))](parts, out, two_i // 2, two_i, n * two_i, PARTS=s,
                                                           BLOCK=block, num_warps=4)
    return out
