"""The code predictor's attention + o product in one launch (kernels/cp_attention_o.py) against its reference and
against the two launches it replaces; its int64 fixed-point sum, and gemv's x_delta / residual_delta that read it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.kernels.compare import rope_tables
from tts_engine.kernels.backend import FIXED_ONE, from_fixed_ref
from tts_engine.kernels.cp_attention import cp_qk_attention
from tts_engine.kernels.cp_attention_o import cp_attention_o, cp_attention_o_ref
from tts_engine.kernels.gemv import gemv, gemv_ref


def _case(device, dtype, hq, hkv, b, t, start, h, seed):
    g = torch.Generator().manual_seed(seed)
    d, positions = 16, 16
    to = dict(device=device, dtype=dtype)
    qkv = (torch.randn(b * t, (hq + 2 * hkv) * d, generator=g) * 2).to(**to)
    norms = tuple((torch.randn(d, generator=g) + 1).to(**to) for _ in range(2))
    cos, sin = rope_tables(positions, d, dtype, device, base=1000.0)
    cache = torch.randn(b + 1, hkv, positions, d, generator=g)
    cache[:, :, start + t:] = math.nan  # cells past the new tokens: never read, never written
    cache[b:] = math.nan  # rows past the batch likewise
    w_o = (torch.randn(h, hq * d, generator=g) / 8).to(**to)
    return qkv, norms, cos, sin, cache, w_o


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,b,t,start,h,block_r", [(4, 2, 1, 2, 0, 24, 8), (4, 2, 2, 1, 5, 32, 16),
                                                        (3, 1, 2, 1, 15, 20, 32), (2, 2, 1, 1, 1, 16, 4)])
def test_cp_attention_o_is_the_attention_then_o(device, dtype, hq, hkv, b, t, start, h, block_r):
    """o_sum holds the o product of the fused attention's output (within the fixed point's and fp32's rounding of
    the reference's fp64 sum), the caches hold what `cp_qk_attention` stores and nothing else, rows of o_sum past
    the tokens stay zero; h not a multiple of block_r leaves no feature out."""
    qkv, norms, cos, sin, cache, w_o = _case(device, dtype, hq, hkv, b, t, start, h, 100 * start + 10 * b + t)
    to = dict(device=device, dtype=dtype)
    caches = {name: (cache.to(**to).clone(), (cache * 0.5).to(**to)) for name in ("fused", "attention")}
    o_sum = torch.zeros(b * t + 1, h, dtype=torch.int64, device=device)
    cp_attention_o(qkv, *norms, cos, sin, *caches["fused"], w_o, o_sum, start, t, 1e-6, hq, hkv, block_r=block_r)
    attn = cp_qk_attention(qkv, *norms, cos, sin, *caches["attention"], start, t, 1e-6, hq, hkv)
    want = F.linear(attn.flatten(1).double(), w_o.double())
    got = o_sum[:b * t].double() / FIXED_ONE
    tol = 1e-5 if dtype == torch.float32 else 1e-3  # fp32 partial sums of bf16 values
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert not o_sum[b * t:].any(), "a row past the tokens was written"
    for fused, attention in zip(caches["fused"], caches["attention"]):
        assert torch.equal(fused.isnan(), attention.isnan()) and torch.equal(fused.nan_to_num(), attention.nan_to_num())
    # the reference in fp32 (bf16 attention outputs may differ by an ulp); masked cells large, not NaN, as torch's
    # attention multiplies them by 0
    ref_sum = torch.zeros_like(o_sum)
    ref_caches = tuple(c.to(**to).float().nan_to_num(s) for c, s in zip((cache, cache * 0.5), (1e4, -1e4)))
    cp_attention_o_ref(qkv.float(), *(a.float() for a in (*norms, cos, sin)), *ref_caches, w_o.float(), ref_sum,
                       start, t, 1e-6, hq, hkv)
    tol = 2e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(got, ref_sum[:b * t].double() / FIXED_ONE, atol=tol, rtol=tol)


def test_cp_attention_o_sum_is_the_same_in_any_order(device):
    """The sum is of integers: run twice into one o_sum it is exactly twice one run (fp32 adds would round
    differently), and a launch per feature-block size gives the same partials' sum whatever the grid order."""
    qkv, norms, cos, sin, cache, w_o = _case(device, torch.bfloat16, 4, 2, 1, 1, 3, 32, 7)
    caches = tuple(c.to(device=device, dtype=torch.bfloat16) for c in (cache, cache * 0.5))
    once, twice = (torch.zeros(1, 32, dtype=torch.int64, device=device) for _ in range(2))
    for out, times in ((once, 1), (twice, 2)):
        for _ in range(times):
            cp_attention_o(qkv, *norms, cos, sin, *caches, w_o, out, 3, 1, 1e-6, 4, 2, block_r=8)
    assert torch.equal(twice, 2 * once)
    assert once.abs().max() > FIXED_ONE / 64, "the sum is (nearly) empty"


def test_cp_attention_o_refuses_bad_shapes(device):
    qkv, norms, cos, sin, cache, w_o = _case(device, torch.float32, 4, 2, 1, 1, 3, 32, 1)
    caches = (cache.to(device), cache.to(device))
    args = (qkv, *norms, cos, sin, *caches)
    with pytest.raises(ValueError, match="o_sum"):
        cp_attention_o(*args, w_o, torch.zeros(1, 32, device=device), 3, 1, 1e-6, 4, 2)
    with pytest.raises(ValueError, match="w_o"):
        cp_attention_o(*args, w_o[:, :32], torch.zeros(1, 32, dtype=torch.int64, device=device), 3, 1, 1e-6, 4, 2)
    with pytest.raises(ValueError, match="fit"):
        cp_attention_o(*args, w_o, torch.zeros(1, 32, dtype=torch.int64, device=device), 15, 2, 1e-6, 4, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("whole_rows", [False, True])
def test_gemv_adds_a_fixed_point_delta_to_x_and_to_the_residual(device, dtype, whole_rows):
    """x_delta: the norm and product of x + delta (rounded as the reference's residual add); residual_delta: the
    residual is residual + delta, and the delta is zeroed; both against gemv_ref, and against gemv of the sum made
    in torch."""
    g = torch.Generator().manual_seed(3)
    to = dict(device=device, dtype=dtype)
    x, w = torch.randn(2, 48, generator=g).to(**to), (torch.randn(24, 48, generator=g) / 8).to(**to)
    ln = (torch.rand(48, generator=g) + 0.5).to(**to)
    launch = dict(block_n=8, block_k=16, whole_rows=whole_rows)
    d = (torch.randn(3, 48, generator=g).double() * FIXED_ONE).long().to(device)
    got = gemv(x, w, norm=(ln, 1e-6), x_delta=d, **launch)
    summed = x + from_fixed_ref(d[:2], dtype)
    tol = 1e-5 if dtype == torch.float32 else 0.0
    torch.testing.assert_close(got, gemv(summed, w, norm=(ln, 1e-6), **launch), atol=tol, rtol=tol)
    torch.testing.assert_close(got, gemv_ref(x, w, norm=(ln, 1e-6), x_delta=d), atol=1e-5, rtol=1e-2)  # [:M] of d
    assert d.any(), "x_delta is read, not consumed"
    res = torch.randn(2, 24, generator=g).to(**to)
    rd = (torch.randn(3, 24, generator=g).double() * FIXED_ONE).long().to(device)
    want = gemv(x, w, residual=res + from_fixed_ref(rd[:2], dtype), **launch)
    got = gemv(x, w, residual=res, residual_delta=rd, residual_early=whole_rows, **launch)
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert not rd[:2].any() and rd[2].all(), "residual_delta: its M rows zeroed, no others"


def test_gemv_refuses_deltas_it_cannot_read(device):
    x, w = torch.zeros(1, 16, device=device), torch.zeros(8, 16, device=device)
    d = torch.zeros(1, 16, dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match="residual_delta needs a residual"):
        gemv(x, w, residual_delta=torch.zeros(1, 8, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match="int64"):
        gemv(x, w, x_delta=d.float())
    with pytest.raises(ValueError, match="row_blocks"):
        gemv(x, w, x_delta=d, whole_rows=True, row_blocks=2)
