"""SiLU(gate) * up on the fused gate/up output equals `silu_mul_ref`."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.silu_mul import silu_mul, silu_mul_ref


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
