"""The code predictor's MLP in one launch (kernels/cp_mlp.py) against its reference and the two launches it replaces;
gemv's pair of x deltas with x_out, and the attention + o launch zeroing the sums before it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.kernels.compare import rope_tables
from tts_engine.kernels.backend import FIXED_ONE, from_fixed_ref
from tts_engine.kernels.cp_attention_o import cp_attention_o
from tts_engine.kernels.cp_mlp import cp_mlp, cp_mlp_ref
from tts_engine.kernels.gemv import gemv


def _mlp_case(device, dtype, m, h, inter, seed):
    g = torch.Generator().manual_seed(seed)
    to = dict(device=device, dtype=dtype)
    x = torch.randn(m, h, generator=g).to(**to)
    delta = (torch.randn(m + 1, h, generator=g).double() * FIXED_ONE).long().to(device)
    ln = (torch.rand(h, generator=g) + 0.5).to(**to)
    w_gate_up = (torch.randn(2 * inter, h, generator=g) / 4).to(**to)
    w_down = (torch.randn(h, inter, generator=g) / 4).to(**to)
    return x, delta, ln, w_gate_up, w_down


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,h,inter,block_i", [(1, 32, 48, 8), (2, 24, 64, 16), (4, 16, 40, 4), (1, 32, 64, 64)])
def test_cp_mlp_is_gate_up_then_down(device, dtype, m, h, inter, block_i):
    """out_sum += down(silu(gate) * up) of x + delta: against the gate/up launch (gemv, SwiGLU epilogue, the same
    delta) and down in fp64, within fp32's summation order; against the torch reference; rows past M untouched;
    inter not a multiple of block_i leaves no feature out."""
    x, delta, ln, w_gate_up, w_down = _mlp_case(device, dtype, m, h, inter, 10 * m + h)
    out = torch.zeros(m + 1, h, dtype=torch.int64, device=device)
    out[m] = 7
    cp_mlp(x, delta, ln, 1e-6, w_gate_up, w_down.t().contiguous(), out, block_i=block_i)
    act = gemv(x, w_gate_up, norm=(ln, 1e-6), silu_mul=True, x_delta=delta, block_n=8, block_k=16)
    want = F.linear(act.double(), w_down.double())
    got = out[:m].double() / FIXED_ONE
    tol = 1e-5 if dtype == torch.float32 else 1e-3
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert torch.equal(out[m], torch.full_like(out[m], 7)), "a row past M was written"
    ref = torch.zeros_like(out)
    cp_mlp_ref(x, delta, ln, 1e-6, w_gate_up, w_down.t().contiguous(), ref)
    torch.testing.assert_close(got, ref[:m].double() / FIXED_ONE, atol=tol * 20, rtol=tol * 20)


def test_cp_mlp_refuses_bad_shapes(device):
    x, delta, ln, w_gate_up, w_down = _mlp_case(device, torch.float32, 1, 16, 32, 0)
    out = torch.zeros(1, 16, dtype=torch.int64, device=device)
    w_down_t = w_down.t().contiguous()
    with pytest.raises(ValueError, match="w_down_t"):
        cp_mlp(x, delta, ln, 1e-6, w_gate_up, w_down, out)
    with pytest.raises(ValueError, match="out_sum"):
        cp_mlp(x, delta, ln, 1e-6, w_gate_up, w_down_t, out.float())
    with pytest.raises(ValueError, match="at most"):
        cp_mlp(x.expand(5, -1), delta, ln, 1e-6, w_gate_up, w_down_t, out)


@pytest.mark.parametrize("whole_rows", [False, True])
def test_gemv_adds_two_deltas_in_turn_and_stores_the_sum(device, whole_rows):
    """x_delta as a pair: x + d1 rounded, then + d2 rounded (the reference's two residual adds); x_out holds that x
    (program 0 writes it once), and the product is that of the stored x."""
    g = torch.Generator().manual_seed(5)
    to = dict(device=device, dtype=torch.bfloat16)
    x, w = torch.randn(2, 48, generator=g).to(**to), (torch.randn(40, 48, generator=g) / 8).to(**to)
    ln = (torch.rand(48, generator=g) + 0.5).to(**to)
    d1, d2 = ((torch.randn(2, 48, generator=g).double() * FIXED_ONE).long().to(device) for _ in range(2))
    made = torch.full_like(x, float("nan"))
    launch = dict(block_n=8, block_k=16, whole_rows=whole_rows)
    got = gemv(x, w, norm=(ln, 1e-6), x_delta=(d1, d2), x_out=made, **launch)
    want_x = (x + from_fixed_ref(d1, x.dtype)) + from_fixed_ref(d2, x.dtype)
    assert torch.equal(made, want_x)
    assert torch.equal(got, gemv(want_x, w, norm=(ln, 1e-6), **launch))
    with pytest.raises(ValueError, match="x_out"):
        gemv(x, w, x_out=made, **launch)


def test_cp_attention_o_zeroes_the_sums_it_is_given(device):
    """zero [planes, rows, H]: the pass's token rows of every plane zeroed, the rest kept."""
    g = torch.Generator().manual_seed(2)
    d, hq, hkv, h = 16, 4, 2, 32
    qkv = torch.randn(2, (hq + 2 * hkv) * d, generator=g).to(device)
    norms = tuple((torch.rand(d, generator=g) + 0.5).to(device) for _ in range(2))
    cos, sin = rope_tables(16, d, torch.float32, device, base=1000.0)
    cache = torch.randn(2, hkv, 16, d, generator=g).to(device)
    w_o = torch.randn(h, hq * d, generator=g).to(device)
    o_sum = torch.zeros(3, h, dtype=torch.int64, device=device)
    zero = torch.full((2, 3, h), 5, dtype=torch.int64, device=device)
    cp_attention_o(qkv, *norms, cos, sin, cache, cache.clone(), w_o, o_sum, 3, 1, 1e-6, hq, hkv, block_r=8, zero=zero)
    assert not zero[:, :2].any() and (zero[:, 2] == 5).all()
    assert o_sum[:2].any()
