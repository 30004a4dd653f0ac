"""RMSNorm and residual-add + RMSNorm kernels equal `rms_norm_ref` / `add_rms_norm_ref`."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.rms_norm import add_rms_norm, add_rms_norm_ref, rms_norm, rms_norm_ref

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
