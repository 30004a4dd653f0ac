"""Comparisons for kernels that promise the reference's rounding."""

from __future__ import annotations

import torch


def assert_same_rounding(got: torch.Tensor, want: torch.Tensor, what: str, *, min_identical: float = 0.97) -> None:
    """Every element written; fp32 to a few ulps; low precision at most one ulp off and almost all
    bit-identical (a kernel that rounds in another order differs in a large fraction of elements;
    reduction order and rsqrt/exp implementations leave a few one-ulp differences)."""
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape} {got.dtype} vs {want.shape}"
    assert torch.isfinite(got).all(), f"{what}: {int((~torch.isfinite(got)).sum())} elements not written"
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: {m}")
        return
    ulp = torch.finfo(got.dtype).eps  # one ulp relative: 2**-7 for bf16, 2**-10 for fp16
    torch.testing.assert_close(got.float(), want.float(), rtol=ulp, atol=ulp * 2**-6,
                               msg=lambda m: f"{what}: more than one ulp: {m}")
    identical = (got == want).float().mean().item()
    assert identical >= min_identical, f"{what}: only {identical:.1%} bit-identical to the reference"


def rope_tables(positions: int, d: int, dtype, device, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [positions, d] (rotate-half layout) in dtype on device: the RoPE tables the q/k norm kernels read."""
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
    emb = torch.arange(positions).float()[:, None] * inv_freq
    emb = torch.cat((emb, emb), dim=-1)
    return emb.cos().to(device, dtype), emb.sin().to(device, dtype)
