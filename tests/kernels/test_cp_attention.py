"""Code-predictor attention over its 16-position cache equals `cp_attention_ref`: causal within the
new positions, static start, rows beyond the batch and positions beyond each query never read."""

from __future__ import annotations

import math

import pytest
import torch

from tests.kernels.compare import assert_same_rounding, rope_tables
from tts_engine.kernels.cp_attention import cp_attention, cp_attention_ref, cp_qk_attention, cp_qk_attention_ref
from tts_engine.kernels.qk_norm_rope import qk_norm_rope


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,b,t,start", [(4, 2, 3, 2, 0), (4, 2, 3, 1, 5), (3, 1, 2, 1, 15), (2, 2, 1, 1, 2)])
def test_cp_attention_equals_reference(device, dtype, hq, hkv, b, t, start):
    g = torch.Generator().manual_seed(start * 10 + t)
    d, positions = 16, 16
    k = torch.randn(b + 2, hkv, positions, d, generator=g)  # rows b.. belong to nobody in this step
    v = torch.randn(b + 2, hkv, positions, d, generator=g)
    k[:, :, start + t:] = 1e4  # not yet written this frame: must not be read
    v[:, :, start + t:] = -1e4
    k[b:], v[b:] = 1e4, -1e4
    q = torch.randn(b, t, hq, 2 * d, generator=g)[..., :d]
    to = dict(device=device, dtype=dtype)
    q, k, v = q.to(**to), k.to(**to), v.to(**to)
    got = cp_attention(q, k, v, start)
    want = cp_attention_ref(q.float(), k.float(), v.float(), start)
    assert got.dtype == dtype and torch.isfinite(got).all(), "outputs not written"
    tol = 2e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


def test_cp_attention_refuses_positions_past_the_cache(device):
    k = torch.zeros(2, 1, 16, 8, device=device)
    with pytest.raises(ValueError, match="fit"):
        cp_attention(torch.zeros(1, 2, 1, 8, device=device), k, k.clone(), 15)


def _tables(positions: int, d: int, dtype, device):
    return rope_tables(positions, d, dtype, device, base=1000.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,b,t,start", [(4, 2, 3, 2, 0), (4, 2, 2, 1, 5), (3, 1, 2, 1, 15), (2, 2, 1, 1, 1)])
def test_cp_qk_attention_equals_norm_rope_then_attention(device, dtype, hq, hkv, b, t, start):
    """The fused launch stores the new tokens' K/V as qk_norm_rope does (and nothing else), and attends
    as norm + RoPE + cp_attention: against the torch reference and against the two kernels it replaces."""
    g = torch.Generator().manual_seed(100 * start + 10 * b + t)
    d, positions = 16, 16
    to = dict(device=device, dtype=dtype)
    qkv = (torch.randn(b * t, (hq + 2 * hkv) * d, generator=g) * 2).to(**to)
    q_norm, k_norm = ((torch.randn(d, generator=g) + 1).to(**to) for _ in range(2))
    cos, sin = _tables(positions, d, dtype, device)
    cache = torch.randn(b + 1, hkv, positions, d, generator=g)
    cache[:, :, start + t:] = math.nan  # cells past the new tokens: never read, never written
    cache[b:] = math.nan  # rows past the batch likewise
    caches = {name: (cache.to(**to).clone(), (cache * 0.5).to(**to)) for name in ("fused", "kernels")}  # no aliases
    # torch's attention multiplies the masked cells by 0, so the reference's hold large values, not NaN
    caches["ref"] = tuple(c.nan_to_num(s) for c, s in zip(caches["fused"], (1e4, -1e4)))
    args = (q_norm, k_norm, cos, sin)
    got = cp_qk_attention(qkv, *args, *caches["fused"], start, t, 1e-6, hq, hkv)
    want = cp_qk_attention_ref(qkv.float(), *(a.float() for a in args), *(c.float() for c in caches["ref"]),
                               start, t, 1e-6, hq, hkv)
    rows = torch.arange(b, device=device).repeat_interleave(t)
    pos = start + torch.arange(t, device=device).repeat(b)
    q = qk_norm_rope(qkv, *args, pos, rows, *caches["kernels"], 1e-6, hq, hkv)
    unfused = cp_attention(q.unflatten(0, (b, t)), *caches["kernels"], start).flatten(0, 1)
    assert got.shape == (b * t, hq, d) and got.dtype == dtype and torch.isfinite(got).all(), "outputs not written"
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(got, unfused, atol=0, rtol=torch.finfo(dtype).eps)  # at most one ulp
    for i, name in enumerate("kv"):
        fused, kernels = caches["fused"][i], caches["kernels"][i]
        assert_same_rounding(fused[:b, :, start:start + t], kernels[:b, :, start:start + t], f"{name} cache")
        untouched = torch.ones_like(fused, dtype=torch.bool)
        untouched[:b, :, start:start + t] = False
        assert torch.equal(fused[untouched].isnan(), cache.to(**to)[untouched].isnan()), f"{name}: other cells written"
        assert torch.equal(torch.nan_to_num(fused[untouched]), torch.nan_to_num(caches["kernels"][i][untouched]))


def test_cp_qk_attention_refuses_positions_past_the_cache(device):
    k = torch.zeros(2, 1, 16, 8, device=device)
    qkv = torch.zeros(2, 3 * 8, device=device)
    w = torch.ones(8, device=device)
    cos = torch.zeros(16, 8, device=device)
    with pytest.raises(ValueError, match="fit"):
        cp_qk_attention(qkv, w, w, cos, cos, k, k.clone(), 15, 2, 1e-6, 1, 1)
