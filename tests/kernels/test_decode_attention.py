"""Split-KV decode attention over the talker's slot cache equals `decode_attention_ref`, for any
split count (including chunks past a row's length and a single chunk), GQA groups that are not
powers of two, and cache cells past each row's length that must never be read (products on the
tensor cores)."""

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


@pytest.mark.parametrize("splits", [None, 1, 2, 4])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_split_attention_equals_reference(device, case, splits):
    args = _inputs(device, torch.float32, *CASES[case], seed=case)
    got = decode_attention(*args, block_n=16, splits=splits)
    want = decode_attention_ref(*args)
    assert torch.isfinite(want).all()
    assert torch.isfinite(got).all(), f"{int((~torch.isfinite(got)).sum())} outputs not written"
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


def test_bf16_attention_is_within_bf16_rounding(device):
    args = _inputs(device, torch.bfloat16, *CASES[1], seed=9)
    got = decode_attention(*args, block_n=16, splits=2)
    want = decode_attention_ref(*(a.float() if a.is_floating_point() else a for a in args))
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want, atol=1e-2, rtol=1e-2)


def test_split_count_fills_the_gpu_at_small_batch_and_stays_one_at_large():
    assert num_splits(1, 8, 2048, 32) == 64
    assert num_splits(1, 8, 100, 32) == 2  # never a chunk shorter than a block
    assert num_splits(64, 8, 2048, 32) == 2
    assert num_splits(256, 8, 2048, 32) == 1


def test_bad_shapes_are_refused_with_why(device):
    args = _inputs(device, torch.float32, *CASES[0], seed=3)
    q, k, v, rows, lengths = args
    with pytest.raises(ValueError, match="head dim >= 16 and q in the cache dtype"):
        decode_attention(q.to(torch.bfloat16), k, v, rows, lengths)
