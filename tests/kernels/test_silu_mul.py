"""SiLU(gate) * up on the fused gate/up output equals `silu_mul_ref`."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.rms_norm import partials_sum_ref, split_k_partials
from tts_engine.kernels.silu_mul import silu_mul, silu_mul_of_partials, silu_mul_ref


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,block", [((5, 74), 16), ((2, 3, 200), 64), ((1, 6), 1024)])
def test_silu_mul_equals_reference(device, shape, block, dtype):
    g = torch.Generator().manual_seed(shape[-1])
    gate_up = (torch.randn(shape, generator=g) * 3).to(device, dtype)
    assert_same_rounding(silu_mul(gate_up, block=block), silu_mul_ref(gate_up), f"silu_mul {shape} {dtype}")


def test_silu_mul_reads_a_strided_input(device):
    g = torch.Generator().manual_seed(0)
    wide = torch.randn(4, 3 * 40, generator=g).to(device)
    gate_up = wide[:, :80]  # rows 120 apart
    assert_same_rounding(silu_mul(gate_up, block=32), silu_mul_ref(gate_up), "strided silu_mul")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("splits,block", [(1, 16), (3, 32), (4, 1024)])
def test_silu_mul_of_split_k_partials_equals_the_reference_of_their_sum(device, splits, block, dtype):
    """The gate/up product as fp32 split-K partials (`split_k_partials`): silu(gate) * up of their sum, rounded as
    `partials_sum_ref` rounds it; within an ulp of the whole product's."""
    g = torch.Generator().manual_seed(splits)
    x = torch.randn(5, 48, generator=g).to(device, dtype)
    w = (torch.randn(2 * 37, 48, generator=g) * 0.3).to(device, dtype)
    parts = split_k_partials(x, w, splits)
    got = silu_mul_of_partials(parts, dtype, block=block)
    assert got.dtype == dtype and got.shape == (5, 37)
    assert_same_rounding(got, silu_mul_ref(partials_sum_ref(parts, dtype)), f"silu_mul of {splits} partials")
    assert_same_rounding(got, silu_mul_ref(torch.nn.functional.linear(x, w)), "against the whole product",
                         min_identical=0.9)


def test_silu_mul_of_partials_refuses_other_shapes(device):
    with pytest.raises(ValueError, match=r"fp32 partials \[S, N, 2 I\]"):
        silu_mul_of_partials(torch.zeros(4, 6, device=device), torch.bfloat16)
    with pytest.raises(ValueError, match="fp32 partials"):
        silu_mul_of_partials(torch.zeros(2, 4, 6, device=device, dtype=torch.bfloat16), torch.bfloat16)
