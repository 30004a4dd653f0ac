"""SwiGLU activation on the fused gate/up projection.

    gate_up [N, 2 I]  (gate columns first, then up) -> silu(gate) * up  [N, I]

Rounding is the reference's `F.silu(gate) * up`: silu in fp32 rounded to the input dtype, then
the product rounded again.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .backend import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import round_to


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


if HAVE_TRITON:

    @triton.jit
    def _silu_mul_kernel(gu_ptr, out_ptr, inter, s_gu, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < inter
        dt = gu_ptr.dtype.element_ty
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
    _silu_mul_kernel[(gu.shape[0], triton.cdiv(inter, block))](gu, out, inter, gu.stride(0), BLOCK=block,
                                                                num_warps=4)
    return out.view(*gate_up.shape[:-1], inter)
