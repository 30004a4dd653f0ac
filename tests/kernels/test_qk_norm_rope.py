"""q/k RMSNorm + RoPE + KV-cache store equals `qk_norm_rope_ref`, in the talker's and the code
predictor's cache layouts; nothing but the (row, position) cells of the new tokens is written."""

from __future__ import annotations

import math

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.qk_norm_rope import qk_norm_rope, qk_norm_rope_ref


def _tables(num_positions: int, d: int, dtype, device):
    inv_freq = 1.0 / (1000.0 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.arange(num_positions).float()[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device, dtype), emb.sin().to(device, dtype)


def _check(device, dtype, hq, hkv, d, cache_shape, rows, positions, seed):
    g = torch.Generator().manual_seed(seed)
    n = len(rows)
    layers = 2
    qkv = (torch.randn(n, (hq + 2 * hkv) * d + 5, generator=g) * 2)[:, 3:3 + (hq + 2 * hkv) * d]  # strided rows
    qkv = qkv.to(device, dtype)
    q_norm = (torch.randn(d, generator=g) + 1).to(device, dtype)
    k_norm = (torch.randn(d, generator=g) + 1).to(device, dtype)
    cos, sin = _tables(cache_shape[2], d, dtype, device)
    rows_t = torch.tensor(rows, device=device)
    pos_t = torch.tensor(positions, device=device)
    # Layer 1 of a [layers, R, Hkv, L, D] stack, as the runner passes it; every cell starts NaN.
    stacks = [torch.full((layers, *cache_shape), math.nan, device=device, dtype=dtype) for _ in range(4)]
    k_got, v_got, k_want, v_want = (s[1] for s in stacks)
    q = qk_norm_rope(qkv, q_norm, k_norm, cos, sin, pos_t, rows_t, k_got, v_got, 1e-6, hq, hkv)
    q_want = qk_norm_rope_ref(qkv, q_norm, k_norm, cos, sin, pos_t, rows_t, k_want, v_want, 1e-6, hq, hkv)
    assert_same_rounding(q, q_want, f"q {dtype}")
    for got, want, name in ((k_got, k_want, "k"), (v_got, v_want, "v")):
        assert_same_rounding(got[rows_t, :, pos_t], want[rows_t, :, pos_t], f"{name} cache {dtype}")  # [n, Hkv, D]
        untouched = got.clone()
        untouched[rows_t, :, pos_t] = math.nan
        assert torch.isnan(untouched).all(), f"{name}: a cell not of a new token was written"
    assert torch.isnan(stacks[0][0]).all() and torch.isnan(stacks[1][0]).all(), "another layer was written"
    v_new = qkv[:, (hq + hkv) * d:].unflatten(-1, (hkv, d))
    assert torch.equal(v_got[rows_t, :, pos_t], v_new), "v must be copied bit for bit"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_talker_layout_rows_are_slots_at_their_own_positions(device, dtype):
    # [slots + 1, Hkv, L, D]: 5 tokens of different slots at different positions; D = 12 (not a power of 2).
    _check(device, dtype, hq=4, hkv=2, d=12, cache_shape=(7, 2, 11, 12), rows=[6, 0, 3, 2, 5],
           positions=[10, 0, 4, 7, 1], seed=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_code_predictor_layout_two_positions_per_row(device, dtype):
    # [B, Hkv, 16, D], the per-frame prefill: tokens (row, 0), (row, 1) of rows 0..2; GQA group 3.
    _check(device, dtype, hq=3, hkv=1, d=16, cache_shape=(4, 1, 16, 16), rows=[0, 0, 1, 1, 2, 2],
           positions=[0, 1, 0, 1, 0, 1], seed=2)


def test_refuses_a_qkv_of_the_wrong_width(device):
    cos = torch.zeros(4, 8, device=device)
    cache = torch.zeros(2, 1, 4, 8, device=device)
    with pytest.raises(ValueError, match="qkv"):
        qk_norm_rope(torch.zeros(1, 8 * 3 + 1, device=device), torch.ones(8, device=device),
                     torch.ones(8, device=device), cos, cos, torch.zeros(1, dtype=torch.long, device=device),
                     torch.zeros(1, dtype=torch.long, device=device), cache, cache.clone(), 1e-6, 1, 1)
