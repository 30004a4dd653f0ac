"""The code predictor's attention inside its o projection (`cp_attention_o`) equals the reference and
the kernels it replaces (`cp_qk_attention`, then `gemv` with the residual), and stores the new K/V as
they do, and nothing else."""

from __future__ import annotations

import math

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.cp_attention import cp_qk_attention
from tts_engine.kernels.cp_attention_o import cp_attention_o, cp_attention_o_ref
from tts_engine.kernels.gemv import gemv


def _tables(positions: int, d: int, dtype, device):
    inv_freq = 1.0 / (1000.0 ** (torch.arange(0, d, 2).float() / d))
    emb = torch.arange(positions).float()[:, None] * inv_freq
    emb = torch.cat((emb, emb), dim=-1)
    return emb.cos().to(device, dtype), emb.sin().to(device, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hq,hkv,t,start,h,block_n", [(4, 2, 2, 0, 24, 8), (4, 2, 1, 5, 24, 8), (8, 2, 1, 15, 16, 4),
                                                     (2, 2, 1, 1, 40, 16), (4, 4, 1, 9, 8, 8)])
def test_equals_the_reference_and_the_two_kernels_it_replaces(device, dtype, hq, hkv, t, start, h, block_n):
    g = torch.Generator().manual_seed(100 * start + 10 * hq + t)
    d, positions = 16, 16
    to = dict(device=device, dtype=dtype)
    qkv = (torch.randn(t, (hq + 2 * hkv) * d, generator=g) * 2).to(**to)
    q_norm, k_norm = ((torch.randn(d, generator=g) + 1).to(**to) for _ in range(2))
    cos, sin = _tables(positions, d, dtype, device)
    w_o = (torch.randn(h, hq * d, generator=g) / math.sqrt(hq * d)).to(**to)
    residual = torch.randn(t, h, generator=g).to(**to)
    cache = torch.randn(2, hkv, positions, d, generator=g)
    cache[:, :, start + t:] = math.nan  # cells past the new tokens: never read, never written
    cache[1:] = math.nan  # the row past the batch likewise
    caches = {name: (cache.to(**to), (cache * 0.5).to(**to)) for name in ("fused", "kernels")}
    caches["ref"] = tuple(c.nan_to_num(s).float() for c, s in zip(caches["fused"], (1e4, -1e4)))
    args = (q_norm, k_norm, cos, sin)
    got = cp_attention_o(qkv, *args, *caches["fused"], start, 1e-6, hq, hkv, w_o, residual, block_n=block_n)
    want = cp_attention_o_ref(qkv.float(), *(a.float() for a in args), *caches["ref"], start, 1e-6, hq, hkv,
                              w_o.float(), residual.float())
    attn = cp_qk_attention(qkv, *args, *caches["kernels"], start, t, 1e-6, hq, hkv)
    unfused = gemv(attn.flatten(1), w_o, residual=residual, block_n=block_n, whole_rows=True)
    assert got.shape == (t, h) and got.dtype == dtype and torch.isfinite(got).all(), "outputs not written"
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    assert_same_rounding(got, unfused, "o(attention) + residual", min_identical=0.9)
    for i, name in enumerate("kv"):
        fused, kernels = caches["fused"][i], caches["kernels"][i]
        assert_same_rounding(fused[:1, :, start:start + t], kernels[:1, :, start:start + t], f"{name} cache")
        untouched = torch.ones_like(fused, dtype=torch.bool)
        untouched[:1, :, start:start + t] = False
        assert torch.equal(fused[untouched].isnan(), cache.to(**to)[untouched].isnan()), f"{name}: other cells written"
        assert torch.equal(torch.nan_to_num(fused[untouched]), torch.nan_to_num(kernels[untouched]))


def test_refuses_what_it_cannot_take(device):
    d, hq, hkv = 8, 2, 1
    qkv = torch.zeros(3, (hq + 2 * hkv) * d, device=device)
    w = torch.ones(d, device=device)
    cos = torch.zeros(16, d, device=device)
    k = torch.zeros(1, hkv, 16, d, device=device)
    w_o = torch.zeros(4, hq * d, device=device)
    with pytest.raises(ValueError, match="1 or 2 tokens"):
        cp_attention_o(qkv, w, w, cos, cos, k, k.clone(), 0, 1e-6, hq, hkv, w_o, torch.zeros(3, 4, device=device))
    with pytest.raises(ValueError, match="1 or 2 tokens"):
        cp_attention_o(qkv[:2], w, w, cos, cos, k, k.clone(), 15, 1e-6, hq, hkv, w_o, torch.zeros(2, 4, device=device))
    with pytest.raises(ValueError, match="residual"):
        cp_attention_o(qkv[:1], w, w, cos, cos, k, k.clone(), 3, 1e-6, hq, hkv, w_o, torch.zeros(1, 5, device=device))
