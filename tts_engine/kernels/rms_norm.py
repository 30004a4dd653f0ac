"""RMSNorm over the last dimension, alone or fused with the residual add before it.

    rms_norm(x, weight, eps)                 x [..., H], weight [H] -> out [..., H]
    add_rms_norm(x, delta, weight, eps)      x, delta [..., H] -> (x + delta [..., H], its norm [..., H])
    add_rms_norm(x, parts, weight, eps)      parts [S, rows, H] fp32: delta = their sum rounded to x's dtype

Rounding is the reference's (`model/layers.RMSNorm`): normalise in fp32, cast to the input dtype,
then multiply by the weight in the input dtype; the residual add rounds to the input dtype before
the norm reads it, as `x = x + f(x)` does in torch. One program per row; the row sits in registers.

`parts` are a product's split-K partial sums (`split_k_partials`: the K range cut in S slices, one
batched cuBLAS launch in fp32): the reduce that cuBLAS launches after its own split-K product (the code
predictor's down at 8-64 rows: 75 launches a frame at batch 32) happens here instead,
delta rounded once as `F.linear`'s fp32 sum is (the sum's order is another, so an element may differ by
an ulp of delta).
"""

from __future__ import annotations

import torch

from .backend import HAVE_TRITON, next_pow2, pdl_launch

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .backend import pdl_start, round_to


def _is_parts(x: torch.Tensor, delta: torch.Tensor | None) -> bool:
    """Is delta split-K partials (a dimension more than x: fp32 [S, rows, H] for x [rows, H])?"""
    if delta is None or delta.dim() != x.dim() + 1:
        return False
    if delta.dtype != torch.float32 or x.dim() != 2 or delta.shape[1:] != x.shape:
        raise ValueError(f"add_rms_norm: split-K partials must be fp32 [S, rows, H] for x [rows, H] "
                         f"{tuple(x.shape)}, got {delta.dtype} {tuple(delta.shape)}")
    return True


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def add_rms_norm_ref(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    if _is_parts(x, delta):
        delta = partials_sum_ref(delta, x.dtype)
    s = x + delta
    return s, rms_norm_ref(s, weight, eps)


def partials_sum_ref(parts: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Split-K partials [S, ...] fp32 -> their sum in the kernels' order, rounded to dtype."""
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total.to(dtype)


def bmm_has_fp32_out() -> bool:
    """Does this torch have bmm with an fp32 output for bf16 / fp16 operands (`torch.bmm(..., out_dtype=)`, which
    `split_k_partials` needs on a GPU; newer torch releases only)?"""
    return "dtype" in torch.ops.aten.bmm.overloads()


def split_k_partials(x: torch.Tensor, w: torch.Tensor, splits: int) -> torch.Tensor:
    """x [M, K] @ w [N, K].T as `splits` partial products over consecutive K slices, in fp32 -> [S, M, N]
    (one batched cuBLAS launch on a GPU, the operands read in place through strided views; fp32 products of
    the widened operands on CPU, where bmm has no fp32 output for bf16)."""
    (m, k), n = x.shape, w.shape[0]
    if k % splits or w.shape[1] != k:
        raise ValueError(f"split_k_partials: K {k} must match w {tuple(w.shape)} and divide by {splits} splits")
    a = x.view(m, splits, k // splits).transpose(0, 1)  # [S, M, K/S]
    b = w.view(n, splits, k // splits).permute(1, 2, 0)  # [S, K/S, N]
    if x.is_cuda and x.dtype != torch.float32:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


if HAVE_TRITON:

    @triton.jit
    def _rms_norm_kernel(x_ptr, d_ptr, w_ptr, sum_ptr, out_ptr, n_cols, eps, s_part,
                         HAS_DELTA: tl.constexpr, PARTS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
        """PARTS > 0: d_ptr holds that many fp32 partial sums of delta, s_part elements apart."""
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        ok = cols < n_cols
        off = row * n_cols + cols
        dt = x_ptr.dtype.element_ty
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)  # a constant: before the wait
        pdl_start(PDL)
        h = tl.load(x_ptr + off, mask=ok, other=0.0).to(tl.float32)
        if HAS_DELTA:
            if PARTS > 0:
                d = tl.zeros((BLOCK,), dtype=tl.float32)
                for p in tl.static_range(PARTS):
                    d += tl.load(d_ptr + p * s_part + off, mask=ok, other=0.0)
                d = round_to(d, dt)
            else:
                d = tl.load(d_ptr + off, mask=ok, other=0.0).to(tl.float32)
            h = round_to(h + d, dt)
            tl.store(sum_ptr + off, h.to(dt), mask=ok)
        r = tl.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps)
        y = round_to(w * round_to(h * r, dt), dt)
        tl.store(out_ptr + off, y.to(dt), mask=ok)


def _launch(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float, pdl: bool = False):
    parts = _is_parts(x, delta)
    if x.dtype != weight.dtype or (delta is not None and not parts and delta.dtype != x.dtype):
        raise ValueError(f"rms_norm needs one dtype, got x {x.dtype}, weight {weight.dtype}")
    h = x.shape[-1]
    x2 = x.reshape(-1, h).contiguous()  # [rows, H]
    d2 = x2 if delta is None else delta.contiguous() if parts else delta.reshape(-1, h).contiguous()
    out = torch.empty_like(x2)
    total = torch.empty_like(x2) if delta is not None else out
    block = next_pow2(h)
    _rms_norm_kernel[(x2.shape[0],)](x2, d2, weight, total, out, h, eps, d2[0].numel() if parts else 0,
                                     HAS_DELTA=delta is not None, PARTS=d2.shape[0] if parts else 0,
                                     BLOCK=block, PDL=pdl, num_warps=max(1, min(8, block // 256)), **pdl_launch(pdl))
    return total.view(x.shape), out.view(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, pdl: bool = False) -> torch.Tensor:
    """pdl: launched with programmatic dependent launch (`backend.pdl_supported`; the weight is read
    before the wait for the previous kernel, x after)."""
    if not HAVE_TRITON:
        return rms_norm_ref(x, weight, eps)
    return _launch(x, None, weight, eps, pdl)[1]


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                 eps: float, pdl: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (x + delta, rms_norm(x + delta)); both [..., H] in x's dtype. delta [..., H] in x's dtype, or fp32
    split-K partials [S, rows, H] (`split_k_partials`) whose sum, rounded to x's dtype, is delta. pdl: as
    `rms_norm`'s."""
    if not HAVE_TRITON:
        return add_rms_norm_ref(x, delta, weight, eps)
    return _launch(x, delta, weight, eps, pdl)
