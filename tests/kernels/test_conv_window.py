"""The streaming conv window kernels equal their torch references (the codec's own path): the columns of a
window GEMM and the concatenation of history and input, bit for bit, and the history they leave behind, for
histories that are rows of a larger state tensor (as the codec runner holds them), chunks shorter than,
as long as and longer than the history; and the whole codec decoded chunk by chunk with them."""

from __future__ import annotations

import copy

import pytest
import torch

from tts_engine.kernels import conv_window
from tts_engine.kernels.conv_window import conv_columns, conv_columns_ref, conv_history_cat, conv_history_cat_ref

# (channels, kernel, dilation, t); n = (kernel - 1) * dilation
CASES = [
    (1, 3, 1, 1),  # one channel, one position, t < n
    (1, 7, 9, 60),  # t > n = 54
    (2, 7, 9, 130),
    (6, 3, 3, 4),  # t < n = 6
    (6, 3, 9, 18),  # t == n
    (10, 7, 9, 54),  # t == n
    (37, 7, 1, 200),  # several position tiles and channel blocks, the last block partial
    (37, 7, 9, 5),  # t < n = 54: the history shifts in place
    (3, 7, 3, 1),
    (3, 7, 3, 1100),  # the concatenation's position tiles too
]
IDS = [f"c{c}-k{k}-d{d}-t{t}" for c, k, d, t in CASES]
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])


@pytest.fixture(params=[conv_window._GPU_TILES, (64, 4, 8)], ids=["gpu-tiles", "small-tiles"])
def tiles(request, monkeypatch):
    """The kernels' tiling on every device: the GPU's, or tiles of a few channels and positions (many
    programs, position tiles shorter than the history)."""
    monkeypatch.setattr(conv_window, "_GPU_TILES", request.param)
    monkeypatch.setattr(conv_window, "_INTERPRETER_TILES", request.param)


def _inputs(b, c, n, t, dtype, device, seed):
    """A state [B, 3, C * n + 5] whose row 1 holds the history [B, C, n] at offset 3 (batch stride
    3 (C n + 5), not C n), and x [B, C, t] transposed (channels contiguous, as the codec's pre_conv gets it)."""
    g = torch.Generator().manual_seed(seed)
    state = torch.randn(b, 3, c * n + 5, generator=g).to(device, dtype)
    x = torch.randn(b, t, c, generator=g).to(device, dtype).transpose(1, 2)
    return state, x


def _history(state, c, n):
    return state[:, 1, 3:3 + c * n].view(state.shape[0], c, n)


@pytest.mark.parametrize("c,k,d,t", CASES, ids=IDS)
@DTYPES
@torch.inference_mode()
def test_columns_equal_the_reference(device, tiles, c, k, d, t, dtype):
    b, n = 2, (k - 1) * d
    state, x = _inputs(b, c, n, t, dtype, device, seed=c * 1000 + n * 10 + t)
    ref_state = state.clone()
    got = conv_columns(_history(state, c, n), x, k, d)
    want = conv_columns_ref(_history(ref_state, c, n), x, k, d)
    assert got.shape == (b, c * k, t) and got.dtype == dtype and got.is_contiguous()
    assert torch.equal(got, want)  # copied: bit-identical, and every element written (NaN-poisoned)
    assert torch.equal(state, ref_state)  # the shifted history, and nothing outside it touched


@pytest.mark.parametrize("c,k,d,t", [*CASES, (4, 3, 1, 0)], ids=[*IDS, "empty-chunk"])
@DTYPES
@torch.inference_mode()
def test_history_cat_equals_the_reference(device, tiles, c, k, d, t, dtype):
    b, n = 3, (k - 1) * d
    state, x = _inputs(b, c, n, t, dtype, device, seed=c * 1000 + n * 10 + t)
    ref_state = state.clone()
    got = conv_history_cat(_history(state, c, n), x)
    want = conv_history_cat_ref(_history(ref_state, c, n), x)
    assert got.shape == (b, c, n + t) and got.dtype == dtype and got.is_contiguous()
    assert torch.equal(got, want)
    assert torch.equal(state, ref_state)


@torch.inference_mode()
def test_the_history_moves_by_the_chunk(device):
    """Two chunks shorter than the history: it holds the old history's tail, then the new inputs."""
    c, n = 2, 6
    state, x = _inputs(1, c, n, 5, torch.float32, device, seed=3)
    history = _history(state, c, n)
    before = history.clone()
    assert torch.equal(conv_history_cat(history, x[:, :, :2]), torch.cat([before, x[:, :, :2]], dim=-1))
    conv_columns(history, x[:, :, 2:], 3, 3)
    assert torch.equal(history, torch.cat([before[:, :, 5:], x], dim=-1))


def test_bad_shapes_are_refused(device):
    state, x = _inputs(2, 4, 6, 3, torch.float32, device, seed=1)
    history = _history(state, 4, 6)
    with pytest.raises(ValueError, match="share B and C"):
        conv_columns(history, x[:, :3], 7, 1)
    with pytest.raises(ValueError, match="share B and C"):
        conv_history_cat(history[:1], x)
    with pytest.raises(ValueError, match="share B and C"):
        conv_history_cat(history[0], x[0])
    with pytest.raises(ValueError, match=r"\(kernel_size - 1\) \* dilation"):
        conv_columns(history, x, 7, 3)
    with pytest.raises(ValueError, match=r"\(kernel_size - 1\) \* dilation"):
        conv_columns(history[:, :, :5], x, 3, 3)
    with pytest.raises(ValueError, match="no position"):
        conv_history_cat(history[:, :, :0], x)
    with pytest.raises(ValueError, match="dtype"):
        conv_columns(history, x.double(), 7, 1)
    with pytest.raises(ValueError, match="dtype"):
        conv_history_cat(history.to(torch.bfloat16), x)


@pytest.mark.parametrize("c,k,d,t", CASES[2:8], ids=IDS[2:8])
@pytest.mark.parametrize("channels_last", [False, True], ids=["first", "last"])
@DTYPES
@torch.inference_mode()
def test_history_cat_with_snake_equals_snake_then_cat(device, tiles, c, k, d, t, channels_last, dtype):
    """A residual unit's act1 inside the window kernel: bit for bit SnakeBeta's kernel, then the concatenation;
    the history keeps the activated inputs (the conv's)."""
    from tts_engine.kernels.snake import snake_beta

    b, n = 2, (k - 1) * d
    state, x = _inputs(b, c, n, t, dtype, device, seed=c * 1000 + n * 10 + t + 2)
    g = torch.Generator().manual_seed(c)
    alpha, beta = ((torch.randn(c, generator=g) * 0.5).to(device, dtype) for _ in range(2))
    ref_state = state.clone()
    got = conv_history_cat(_history(state, c, n), x, channels_last, (alpha, beta))
    want = conv_history_cat(_history(ref_state, c, n), snake_beta(x, alpha, beta), channels_last)
    assert torch.equal(got, want) and torch.equal(state, ref_state)
    assert not torch.equal(got, conv_history_cat_ref(_history(state.clone(), c, n), x))  # it is applied


@pytest.mark.parametrize("c,k,d,t", CASES, ids=IDS)
@DTYPES
@torch.inference_mode()
def test_history_cat_channels_last_equals_the_reference(device, tiles, c, k, d, t, dtype):
    """The codec's channels-last blocks: the concatenation laid out channels-last, the history as before."""
    b, n = 2, (k - 1) * d
    state, x = _inputs(b, c, n, t, dtype, device, seed=c * 1000 + n * 10 + t + 1)
    ref_state = state.clone()
    got = conv_history_cat(_history(state, c, n), x, channels_last=True)
    want = conv_history_cat_ref(_history(ref_state, c, n), x)
    assert got.shape == (b, c, n + t) and got.transpose(1, 2).is_contiguous()
    assert torch.equal(got, want)
    assert torch.equal(state, ref_state)


@pytest.mark.parametrize("window_max", [1 << 24, 2000], ids=["columns", "past-the-window-limit"])
@torch.inference_mode()
def test_the_codec_decodes_chunks_with_the_kernels(device, window_max, monkeypatch):
    """The tiny codec on the fast path, chunk by chunk: with the window kernels its audio and state equal
    the same decoder's with their torch references (bit for bit: the kernels copy), and the all-torch
    decoder's up to rounding; every stateful conv of every chunk goes through a kernel (past the window
    limit the later dense convs too take the concatenation kernel)."""
    from tts_engine.config import CONFIG_DIR, CodecConfig
    from tts_engine.model import codec_blocks
    from tts_engine.model.codec_blocks import CausalConv1d, CausalConvTranspose1d
    from tts_engine.model.codec_init import random_codec_decoder

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # the reference's cuDNN convs in fp32 on a GPU
    cfg = CodecConfig.from_file(CONFIG_DIR / "tiny-speech_tokenizer.config.json")
    torch.manual_seed(0)
    ref = random_codec_decoder(cfg).to(device).eval()
    fused = copy.deepcopy(ref).use_fused_kernels(window_max=window_max)
    for m in fused.modules():  # SnakeBeta's kernel is tested elsewhere; under the interpreter it is slow
        if type(m).__name__ == "SnakeBeta":
            m.fused = False
    stateful = [m for m in fused.modules() if isinstance(m, (CausalConv1d, CausalConvTranspose1d)) and m.history_len]
    calls = {"columns": 0, "cat": 0}

    def counted(name, fn):
        def wrapper(*args):
            calls[name] += 1
            return fn(*args)
        return wrapper

    codes = torch.randint(0, cfg.decoder.codebook_size, (2, cfg.decoder.num_quantizers, 5),
                          generator=torch.Generator().manual_seed(1)).to(device)
    states = {key: model.new_state(2) for key, model in (("kernels", fused), ("torch", fused), ("ref", ref))}
    chunks = ((0, 1), (1, 3), (3, 5))  # a first one-frame chunk, then 2-frame chunks
    for a, b in chunks:
        monkeypatch.setattr(codec_blocks, "conv_columns", counted("columns", conv_columns))
        monkeypatch.setattr(codec_blocks, "conv_history_cat", counted("cat", conv_history_cat))
        got, _ = fused.decode_chunk(codes[:, :, a:b], states["kernels"])
        monkeypatch.setattr(codec_blocks, "conv_columns", conv_columns_ref)
        monkeypatch.setattr(codec_blocks, "conv_history_cat", conv_history_cat_ref)
        same, _ = fused.decode_chunk(codes[:, :, a:b], states["torch"])
        want, _ = ref.decode_chunk(codes[:, :, a:b], states["ref"])
        assert torch.equal(got, same), (a, b)
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (a, b, (got - want).abs().max())
    assert torch.equal(states["kernels"].rows, states["torch"].rows)
    assert calls["columns"] > 0 and calls["cat"] > 0
    assert calls["columns"] + calls["cat"] == len(stateful) * len(chunks)
    if window_max == 1 << 24:  # every dense conv a window GEMM but the channels-last ones, which cuDNN runs
        dense = sum(1 for m in stateful if isinstance(m, CausalConv1d) and m.conv.groups == 1 and m.cl_weight is None)
        assert calls["columns"] == dense * len(chunks)


@torch.inference_mode()
def test_conv_windows_off_leaves_the_convs_to_torch(device, monkeypatch):
    """`use_fused_kernels(conv_windows=False)`: no stateful conv calls a window kernel (the A/B switch)."""
    from tts_engine.config import CONFIG_DIR, CodecConfig
    from tts_engine.model import codec_blocks
    from tts_engine.model.codec_init import random_codec_decoder

    cfg = CodecConfig.from_file(CONFIG_DIR / "tiny-speech_tokenizer.config.json")
    torch.manual_seed(0)
    codec = random_codec_decoder(cfg).to(device).eval().use_fused_kernels(conv_windows=False)
    for m in codec.modules():
        if type(m).__name__ == "SnakeBeta":
            m.fused = False

    def refuse(*args):
        raise AssertionError("a window kernel was called with conv_windows=False")
    monkeypatch.setattr(codec_blocks, "conv_columns", refuse)
    monkeypatch.setattr(codec_blocks, "conv_history_cat", refuse)
    codes = torch.randint(0, cfg.decoder.codebook_size, (1, cfg.decoder.num_quantizers, 2)).to(device)
    pcm, _ = codec.decode_chunk(codes, codec.new_state(1))
    assert pcm.isfinite().all()
    assert not any(getattr(m, "window_kernel", False) for m in codec.modules())
