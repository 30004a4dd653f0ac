"""RMSNorm and residual-add + RMSNorm kernels equal `rms_norm_ref` / `add_rms_norm_ref`."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.rms_norm import add_rms_norm, add_rms_norm_ref, rms_norm, rms_norm_ref, split_k_partials

SHAPES = [(3, 5, 40), (1, 7), (2, 1, 130)]  # hidden sizes off the power-of-two block


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_equals_reference(device, shape, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3).to(device, dtype)
    w = (torch.randn(shape[-1], generator=g) + 1).to(device, dtype)
    assert_same_rounding(rms_norm(x, w, 1e-6), rms_norm_ref(x, w, 1e-6), f"rms_norm {shape} {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_add_rms_norm_returns_the_rounded_sum_and_its_norm(device, shape, dtype):
    g = torch.Generator().manual_seed(7 + sum(shape))
    x = (torch.randn(shape, generator=g) * 4).to(device, dtype)
    delta = torch.randn(shape, generator=g).to(device, dtype)
    w = torch.randn(shape[-1], generator=g).to(device, dtype)
    total, normed = add_rms_norm(x, delta, w, 1e-5)
    want_total, want_normed = add_rms_norm_ref(x, delta, w, 1e-5)
    assert torch.equal(total, want_total), "the residual stream must be x + delta rounded exactly as torch does"
    assert_same_rounding(normed, want_normed, f"add_rms_norm {shape} {dtype}")


def test_rms_norm_refuses_mixed_dtypes(device):
    x = torch.randn(2, 8, device=device)
    with pytest.raises(ValueError, match="dtype"):
        rms_norm(x, torch.ones(8, device=device, dtype=torch.bfloat16), 1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("splits", [1, 3, 4])
def test_add_rms_norm_sums_split_k_partials_as_the_product(device, splits, dtype):
    """delta as fp32 split-K partials (`split_k_partials`): the residual stream is x + (their sum in the kernel's
    order, rounded) exactly, and within an ulp of x + F.linear(a, w) (cuBLAS sums in another order)."""
    g = torch.Generator().manual_seed(11 + splits)
    a = torch.randn(5, 96, generator=g).to(device, dtype)
    w = (torch.randn(40, 96, generator=g) * 0.1).to(device, dtype)
    x = (torch.randn(5, 40, generator=g) * 4).to(device, dtype)
    ln = (torch.randn(40, generator=g) + 1).to(device, dtype)
    parts = split_k_partials(a, w, splits)
    assert parts.shape == (splits, 5, 40) and parts.dtype == torch.float32
    total, normed = add_rms_norm(x, parts, ln, 1e-6)
    want_total, want_normed = add_rms_norm_ref(x, parts, ln, 1e-6)
    assert torch.equal(total, want_total), "the residual stream must be x + the partials' sum, rounded as the ref"
    assert_same_rounding(normed, want_normed, f"add_rms_norm of {splits} partials")
    assert_same_rounding(total, x + torch.nn.functional.linear(a, w), "partials against the whole product",
                         min_identical=0.9)


def test_split_k_partials_refuses_a_k_it_cannot_cut(device):
    a = torch.randn(2, 10, device=device, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="divide"):
        split_k_partials(a, torch.randn(4, 10, device=device, dtype=torch.bfloat16), 3)
    with pytest.raises(ValueError, match=r"\[S, rows, H\]"):
        add_rms_norm(a, torch.zeros(2, 3, 10, device=device), torch.ones(10, device=device, dtype=torch.bfloat16),
                     1e-6)
