"""The talker's fused decode attention (q/k norm + RoPE + K/V store + attention over the whole context, one
launch) equals its reference and the two kernels it replaces: rows at different positions (the new key
alone, one block, several blocks with a partial last one), slots out of order, cells past each row's
position and rows of other slots never read, the new K/V stored where qk_norm_rope stores them and
nowhere else."""

from __future__ import annotations

import math

import pytest
import torch

from tests.kernels.compare import assert_same_rounding, rope_tables
from tts_engine.kernels.decode_attention import decode_attention
from tts_engine.kernels.qk_norm_rope import qk_norm_rope
from tts_engine.kernels.talker_attention import decode_qk_attention, decode_qk_attention_ref


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dot,stages", [(True, 1), (False, 1), (True, 2)])
@pytest.mark.parametrize("hq,hkv,positions", [(4, 2, (0, 9, 16, 37)), (3, 1, (15, 1)), (2, 2, (40,))])
def test_decode_qk_attention_equals_norm_rope_then_attention(device, dtype, dot, stages, hq, hkv, positions):
    g = torch.Generator().manual_seed(sum(positions) + 7 * hq + dot)
    d, length, block_n = 16, 48, 16
    b = len(positions)
    to = dict(device=device, dtype=dtype)
    qkv = (torch.randn(b, (hq + 2 * hkv) * d, generator=g) * 2).to(**to)
    q_norm, k_norm = ((torch.randn(d, generator=g) + 1).to(**to) for _ in range(2))
    cos, sin = rope_tables(length, d, dtype, device)
    pos = torch.tensor(positions, device=device)
    rows = torch.arange(b, device=device).flip(0) * 2 + 1  # slots out of order, others between them
    cache = torch.randn(2 * b + 2, hkv, length, d, generator=g)
    written = torch.zeros(cache.shape, dtype=torch.bool)
    for r, p in zip(rows.tolist(), positions):
        written[r, :, :p] = True
    cache[~written] = math.nan  # later positions and other slots: never read
    caches = {name: (cache.to(**to).clone(), (cache * 0.5).to(**to)) for name in ("fused", "kernels")}  # no aliases
    # torch's attention multiplies masked cells by 0, so the reference's hold large values, not NaN
    caches["ref"] = tuple(c.nan_to_num(s) for c, s in zip(caches["fused"], (1e4, -1e4)))
    args = (q_norm, k_norm, cos, sin)
    got = decode_qk_attention(qkv, *args, pos, rows, *caches["fused"], 1e-6, hq, hkv, dot=dot, block_n=block_n,
                              stages=stages)
    want = decode_qk_attention_ref(qkv.float(), *(a.float() for a in args), pos, rows,
                                   *(c.float() for c in caches["ref"]), 1e-6, hq, hkv)
    q = qk_norm_rope(qkv, *args, pos, rows, *caches["kernels"], 1e-6, hq, hkv)
    unfused = decode_attention(q, *caches["kernels"], rows, pos + 1, block_n=block_n)
    assert got.shape == (b, hq, d) and got.dtype == dtype and torch.isfinite(got).all(), "outputs not written"
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(got.float(), unfused.float(), atol=tol, rtol=tol)
    new = torch.zeros(cache.shape, dtype=torch.bool)
    for r, p in zip(rows.tolist(), positions):
        new[r, :, p] = True
    for i, name in enumerate("kv"):
        fused, kernels = caches["fused"][i], caches["kernels"][i]
        assert_same_rounding(fused[new.to(device)], kernels[new.to(device)], f"{name} cache at the new positions")
        untouched = ~new.to(device)
        before = (cache if i == 0 else cache * 0.5).to(**to)[untouched]
        assert torch.equal(fused[untouched].nan_to_num(7.0), before.nan_to_num(7.0)), f"{name} cache written elsewhere"


def test_decode_qk_attention_refuses_a_cache_of_other_heads(device):
    qkv = torch.zeros(1, (4 + 2 * 2) * 16, device=device)
    cache = torch.zeros(2, 1, 8, 16, device=device)
    with pytest.raises(ValueError, match="caches must be"):
        decode_qk_attention(qkv, torch.ones(16, device=device), torch.ones(16, device=device),
                            *rope_tables(8, 16, torch.float32, device), torch.tensor([1], device=device),
                            torch.tensor([0], device=device), cache, cache.clone(), 1e-6, 4, 2)
