"""The codec window transformer's RoPE + K/V window kernel equals its torch reference (the codec's own
path): q, the window-then-new keys and values attention reads, and the windows it leaves behind, for
windows that are rows of a larger state tensor (as the codec runner holds them) and chunks longer
than the window."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.codec_rope_kv import codec_rope_kv, codec_rope_kv_ref


def _inputs(b, t, s, h, hkv, d, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(b, t, (h + 2 * hkv) * d + 8, generator=g)[:, :, 8:]  # row stride past the width
    angles = torch.rand(b, 1, t, d // 2, generator=g) * 30
    angles = torch.cat((angles, angles), dim=-1)
    # the windows: [B, Hkv, S, D] views into rows of a [B, 3, Hkv, S, D] state (batch stride 3x the window)
    state = torch.randn(b, 3, hkv, s, d, generator=g)
    cast = dict(device=device, dtype=dtype)
    return (qkv.to(**cast), angles.cos().to(**cast), angles.sin().to(**cast),
            state.to(**cast))


@pytest.mark.parametrize("b,t,s,h,hkv", [(1, 1, 71, 4, 4), (3, 2, 71, 4, 2), (2, 5, 3, 2, 2), (2, 12, 9, 3, 1)],
                         ids=["first-chunk", "tick", "chunk-past-window", "gqa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@torch.inference_mode()
def test_rope_and_window_equal_the_reference(device, b, t, s, h, hkv, dtype):
    d = 16
    qkv, cos, sin, state = _inputs(b, t, s, h, hkv, d, dtype, device, seed=b * 100 + t)
    ref_state = state.clone()
    q, k, v = codec_rope_kv(qkv, cos, sin, state[:, 0], state[:, 2], h, hkv)
    q_want, k_want, v_want = codec_rope_kv_ref(qkv, cos, sin, ref_state[:, 0], ref_state[:, 2], h, hkv)
    assert q.shape == (b, h, t, d) and k.shape == v.shape == (b, hkv, s + t, d)
    assert_same_rounding(q, q_want.contiguous(), f"q {dtype}")
    assert torch.equal(v, v_want)  # copied, never rounded
    assert_same_rounding(k, k_want, f"k {dtype}")
    assert torch.equal(state[:, 2], ref_state[:, 2])  # the value window, shifted
    assert_same_rounding(state[:, 0], ref_state[:, 0], f"key window {dtype}")
    assert torch.equal(state[:, 1], ref_state[:, 1])  # a row between the windows is not touched


@torch.inference_mode()
def test_the_windows_move_by_the_chunk(device):
    """After two chunks the window holds the last S frames: the old window's tail, then the new keys."""
    b, s, h, hkv, d = 1, 4, 1, 1, 16
    qkv, cos, sin, state = _inputs(b, 3, s, h, hkv, d, torch.float32, device, seed=7)
    before = state[:, 2].clone()
    _, _, v = codec_rope_kv(qkv, cos, sin, state[:, 0], state[:, 2], h, hkv)
    new_v = qkv.view(b, 3, h + 2 * hkv, d)[:, :, h + hkv:].transpose(1, 2)  # [B, Hkv, 3, D]
    assert torch.equal(v, torch.cat([before, new_v], dim=2))
    assert torch.equal(state[:, 2], torch.cat([before[:, :, 3:], new_v], dim=2))


def test_bad_shapes_are_refused(device):
    qkv, cos, sin, state = _inputs(1, 2, 5, 2, 2, 16, torch.float32, device, seed=1)
    with pytest.raises(ValueError, match="qkv"):
        codec_rope_kv(qkv, cos, sin, state[:, 0], state[:, 2], 3, 2)
    with pytest.raises(ValueError, match="cos/sin"):
        codec_rope_kv(qkv, cos[:, :, :1], sin[:, :, :1], state[:, 0], state[:, 2], 2, 2)
    with pytest.raises(ValueError, match="windows"):
        codec_rope_kv(qkv, cos, sin, state[:, 0, :1], state[:, 2, :1], 2, 2)
