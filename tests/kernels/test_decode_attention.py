"""Split-KV decode attention over the talker's slot cache equals `decode_attention_ref`, for any
split count (including chunks past a row's length and a single chunk), GQA groups that are not
powers of two, and cache cells past each row's length that must never be read; version 2
(CUDA-core products) and version 3 (tensor-core products)."""

from __future__ import annotations

import pytest
import torch

from tts_engine.kernels.decode_attention import decode_attention, decode_attention_ref, num_splits

# (Hq, Hkv, D, L, rows, lengths)
CASES = [
    (4, 2, 16, 37, [3, 3, 0], [1, 37, 20]),  # the same slot read by two rows
    (6, 2, 32, 50, [1, 0, 2, 4], [50, 17, 16, 33]),  # group 3
    (2, 2, 16, 9, [0], [9]),
]


def _inputs(device, dtype, hq, hkv, d, max_len, rows, lengths, seed):
    g = torch.Generator().manual_seed(seed)
    n = max(rows) + 2
    k_all = torch.randn(2, n, hkv, max_len, d, generator=g)
    v_all = torch.randn(2, n, hkv, max_len, d, generator=g)
    for r in range(n):
        valid = max((m for r_, m in zip(rows, lengths) if r_ == r), default=0)
        k_all[1, r, :, valid:] = 1e4  # past every reader's length: reading one changes the output
        v_all[1, r, :, valid:] = -1e4
    q = torch.randn(len(rows), hq, 2 * d, generator=g)[:, :, :d]  # strided heads, as a view of qkv would be
    to = dict(device=device, dtype=dtype)
    return (q.to(**to), k_all.to(**to)[1], v_all.to(**to)[1], torch.tensor(rows, device=device),
            torch.tensor(lengths, device=device))


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("splits", [None, 1, 2, 4])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_split_attention_equals_reference(device, case, splits, version):
    args = _inputs(device, torch.float32, *CASES[case], seed=case)
    got = decode_attention(*args, block_n=8 if version == 2 else 16, splits=splits, version=version)
    want = decode_attention_ref(*args)
    assert torch.isfinite(want).all()
    assert torch.isfinite(got).all(), f"{int((~torch.isfinite(got)).sum())} outputs not written"
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


# Lengths for version 3's blocks of 16: no earlier position (1), the newest position inside the first
# block (9), at its end (16), starting the second (17), and chunks of several blocks (33, 37).
EARLY_LENGTHS = [[1, 37, 9], [17, 16, 33, 1], [9]]


@pytest.mark.parametrize("splits", [None, 1, 2, 4])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_early_loads_of_earlier_positions_give_the_same_attention(device, case, splits):
    """Version 3's `early` (the talker's PDL steps: a program's first block of earlier positions loaded
    before the wait, the newest position after it) equals the reference and the kernel without it."""
    hq, hkv, d, max_len, rows, _ = CASES[case]
    args = _inputs(device, torch.float32, hq, hkv, d, max_len, rows, EARLY_LENGTHS[case], seed=case + 10)
    got = decode_attention(*args, block_n=16, splits=splits, version=3, early=True)
    assert torch.isfinite(got).all(), f"{int((~torch.isfinite(got)).sum())} outputs not written"
    torch.testing.assert_close(got, decode_attention_ref(*args), atol=2e-5, rtol=2e-5)
    assert torch.equal(got, decode_attention(*args, block_n=16, splits=splits, version=3))
    with pytest.raises(ValueError, match="version 3"):
        decode_attention(*args, block_n=16, splits=splits, version=2, early=True)


@pytest.mark.parametrize("version", [2, 3])
def test_bf16_attention_is_within_bf16_rounding(device, version):
    args = _inputs(device, torch.bfloat16, *CASES[1], seed=9)
    got = decode_attention(*args, block_n=16, splits=2, version=version)
    want = decode_attention_ref(*(a.float() if a.is_floating_point() else a for a in args))
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want, atol=1e-2, rtol=1e-2)


def test_split_count_fills_the_gpu_at_small_batch_and_stays_one_at_large():
    assert num_splits(1, 8, 2048, 32) == 64
    assert num_splits(1, 8, 100, 32) == 2  # never a chunk shorter than a block
    assert num_splits(64, 8, 2048, 32) == 2
    assert num_splits(256, 8, 2048, 32) == 1


# (Hq, Hkv, D, L, rows, lengths): distinct rows, as a talker step's slots are (each row writes its newest
# position into its own slot); the newest position first in a chunk, last in one, alone, and mid-block.
QK_CASES = [(4, 2, 16, 37, [3, 1, 0], [1, 37, 20]), (6, 2, 32, 50, [1, 0, 2, 4], [50, 17, 16, 33]),
            (2, 2, 16, 9, [0], [9])]


def _rope_tables(positions: int, d: int, dtype, device):
    inv_freq = 1.0 / (1000.0 ** (torch.arange(0, d, 2).float() / d))
    emb = torch.arange(positions).float()[:, None] * inv_freq
    emb = torch.cat((emb, emb), dim=-1)
    return emb.cos().to(device, dtype), emb.sin().to(device, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("splits,early", [(None, False), (1, False), (2, True), (4, False), (4, True)])
@pytest.mark.parametrize("case", range(len(QK_CASES)))
def test_qk_attention_equals_norm_rope_then_attention(device, case, splits, early, dtype):
    """The talker's attention with q/k norm + RoPE + the new K/V's store in its launch (version 3)
    stores what qk_norm_rope stores and nothing else, and attends as qk_norm_rope + decode_attention:
    against those two kernels (one ulp at most, caches rounded alike) and the torch reference."""
    import math

    from tests.kernels.compare import assert_same_rounding
    from tts_engine.kernels.decode_attention import decode_qk_attention, decode_qk_attention_ref
    from tts_engine.kernels.qk_norm_rope import qk_norm_rope

    hq, hkv, d, max_len, rows, lengths = QK_CASES[case]
    g = torch.Generator().manual_seed(100 * case + (splits or 0) + 10 * early)
    to = dict(device=device, dtype=dtype)
    b, n = len(rows), max(rows) + 2
    qkv = (torch.randn(b, (hq + 2 * hkv) * d, generator=g) * 2).to(**to)
    q_norm, k_norm = ((torch.randn(d, generator=g) + 1).to(**to) for _ in range(2))
    cos, sin = _rope_tables(max_len, d, dtype, device)
    cache = torch.randn(n, hkv, max_len, d, generator=g)
    for r, length in zip(rows, lengths):
        cache[r, :, length - 1:] = math.nan  # the newest position (written here) and past it (never read)
    cache[[r for r in range(n) if r not in rows]] = math.nan
    caches = {name: (cache.to(**to).clone(), (cache * 0.5).to(**to)) for name in ("fused", "kernels")}  # no aliases
    caches["ref"] = tuple(c.nan_to_num(s).float() for c, s in zip(caches["fused"], (1e4, -1e4)))
    rows_t, lengths_t = torch.tensor(rows, device=device), torch.tensor(lengths, device=device)
    args = (q_norm, k_norm, cos, sin)
    launch = dict(block_n=16, splits=splits)
    got = decode_qk_attention(qkv, *args, *caches["fused"], rows_t, lengths_t, 1e-6, hq, hkv, early=early, **launch)
    q = qk_norm_rope(qkv, *args, lengths_t - 1, rows_t, *caches["kernels"], 1e-6, hq, hkv)
    unfused = decode_attention(q, *caches["kernels"], rows_t, lengths_t, version=3, **launch)
    want = decode_qk_attention_ref(qkv.float(), *(a.float() for a in args), *caches["ref"], rows_t, lengths_t, 1e-6,
                                   hq, hkv)
    assert got.shape == (b, hq, d) and got.dtype == dtype and torch.isfinite(got).all(), "outputs not written"
    tol = 2e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(got, unfused, atol=0, rtol=torch.finfo(dtype).eps)  # at most one ulp
    for i, name in enumerate("kv"):
        fused, kernels = caches["fused"][i], caches["kernels"][i]
        newest = (rows_t, slice(None), lengths_t - 1)
        assert_same_rounding(fused[newest], kernels[newest], f"{name} cache")
        untouched = torch.ones_like(fused, dtype=torch.bool)
        untouched[newest] = False
        assert torch.equal(fused[untouched].isnan(), cache.to(**to)[untouched].isnan()), f"{name}: other cells written"
        assert torch.equal(fused[untouched].nan_to_num(), kernels[untouched].nan_to_num())


def test_qk_attention_refuses_a_qkv_of_other_heads(device):
    from tts_engine.kernels.decode_attention import decode_qk_attention

    d = 16
    k = torch.zeros(2, 2, 8, d, device=device)
    w = torch.ones(d, device=device)
    cos = torch.zeros(8, d, device=device)
    one = torch.zeros(1, dtype=torch.long, device=device)
    with pytest.raises(ValueError, match="qkv"):
        decode_qk_attention(torch.zeros(1, 7 * d, device=device), w, w, cos, cos, k, k.clone(), one, one + 1, 1e-6,
                            4, 2)
