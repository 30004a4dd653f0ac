"""Code-predictor attention over its 16-position cache equals `cp_attention_ref`: causal within the
new positions, static start, rows beyond the batch and positions beyond each query never read."""

from __future__ import annotations

import pytest
import torch

from tts_engine.kernels.cp_attention import cp_attention, cp_attention_ref


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
