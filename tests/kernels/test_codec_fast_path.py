"""The codec's fast path (`CodecDecoder.use_fused_kernels`: fused SnakeBeta, the quantizer's projected
table, the transformer's packed layers with Triton RMSNorm and SwiGLU) equals the all-torch decoder.
On CPU the kernels run under Triton's interpreter."""

from __future__ import annotations

import copy

import pytest
import torch

from tts_engine.config import CONFIG_DIR, CodecConfig
from tts_engine.model.codec_init import random_codec_decoder


@pytest.fixture(autouse=True)
def exact_fp32():
    """With a GPU these tests run on CUDA, where torch's fp32 convs (cuDNN) and matmuls may use TF32 (the
    reference was 7e-4 off against a 2e-5 tolerance): fp32 for both sides here; on CPU it changes nothing.
    Saved and restored by hand, not by monkeypatch: `torch.backends.cuda.matmul.allow_tf32` is served by
    the module's __getattr__, which pytest's monkeypatch (9.2) cannot see and so tries to delete at teardown."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _pair(name: str, device):
    cfg = CodecConfig.from_file(CONFIG_DIR / f"{name}.config.json")
    torch.manual_seed(0)
    ref = random_codec_decoder(cfg).to(device).eval()
    return cfg, ref, copy.deepcopy(ref).use_fused_kernels()


def _codes(cfg, frames: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, cfg.decoder.codebook_size, (batch, cfg.decoder.num_quantizers, frames),
                         generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ["tiny-speech_tokenizer", "speech_tokenizer"])
@torch.inference_mode()
def test_fused_chunks_equal_the_reference(device, name):
    cfg, ref, fused = _pair(name, device)
    assert all(m.fused for m in fused.modules() if type(m).__name__ == "SnakeBeta")
    assert fused.quantizer.table is not None and fused.pre_transformer.fused is not None
    if name == "speech_tokenizer" and device.type == "cpu":
        # The real config's SnakeBeta under the interpreter takes minutes (thousands of programs a
        # call); the kernel is tested on the tiny config here and alone in test_snake.py.
        for m in fused.modules():
            if type(m).__name__ == "SnakeBeta":
                m.fused = False
    codes = _codes(cfg, 5).to(device)
    s_ref, s_fused = ref.new_state(2), fused.new_state(2)
    for a, b in ((0, 1), (1, 3), (3, 5)):  # a first one-frame chunk, then the tick's 2-frame chunks
        want, s_ref = ref.decode_chunk(codes[:, :, a:b], s_ref)
        got, s_fused = fused.decode_chunk(codes[:, :, a:b], s_fused)
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (got - want).abs().max()
    for g, w in zip(s_fused.tensors(), s_ref.tensors(), strict=True):  # fp32 rounding, grown through ~30 convs
        assert (g.float() - w.float()).abs().max() <= 2e-5 * (1 + w.float().abs().max())
    assert torch.allclose(fused(codes), ref(codes), atol=2e-5, rtol=1e-4)


@torch.inference_mode()
def test_fusing_keeps_the_official_state_dict_and_can_be_undone(device):
    cfg, ref, fused = _pair("tiny-speech_tokenizer", device)
    assert list(fused.state_dict()) == list(ref.state_dict())
    codes = _codes(cfg, 3).to(device)
    fused.use_fused_kernels(False)
    assert fused.quantizer.table is None and fused.pre_transformer.fused is None
    assert torch.equal(fused(codes), ref(codes))


@torch.inference_mode()
def test_packed_weights_follow_a_cast_after_fusing(device):
    cfg, ref, fused = _pair("tiny-speech_tokenizer", device)
    fused = fused.to(torch.bfloat16)
    assert fused.quantizer.table.dtype == torch.bfloat16 and fused.quantizer.offsets.dtype == torch.long
    assert all(w.qkv.dtype == torch.bfloat16 and w.down.dtype == torch.bfloat16 for w in fused.pre_transformer.fused)
    codes = _codes(cfg, 6).to(device)
    exact = ref(codes)
    got, ref_bf16 = fused(codes).float(), copy.deepcopy(ref).to(torch.bfloat16)(codes).float()
    assert got.isfinite().all()

    def error(pcm):  # relative RMS error against the exact fp32 decode
        return ((pcm - exact).pow(2).mean().sqrt() / exact.pow(2).mean().sqrt()).item()

    # Both paths round differently in bf16 (~4 % here); the fused one must be as close to exact.
    assert error(got) <= 1.5 * error(ref_bf16) < 0.1


def test_a_changed_weight_changes_the_fused_output(device):
    """The fused path reads the packed copies: a weight changed after fusing (here the quantizer's
    projection and one layer's layer scale) is seen only once fused again, so the parity test above
    compares two real computations."""
    cfg, _, fused = _pair("tiny-speech_tokenizer", device)
    codes = _codes(cfg, 3).to(device)
    with torch.inference_mode():
        before = fused(codes)
    with torch.no_grad():
        fused.quantizer.rvq_rest.output_proj.weight.mul_(2)
        fused.pre_transformer.layers[0].mlp_layer_scale.scale.mul_(3)
    with torch.inference_mode():
        assert torch.equal(fused(codes), before)
        fused.use_fused_kernels()
        after = fused(codes)
        assert not torch.allclose(after, before, atol=1e-4)
        assert torch.allclose(after, copy.deepcopy(fused).use_fused_kernels(False)(codes), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("c_in,c_out,kernel,stride", [(6, 4, 2, 2), (6, 4, 16, 8), (5, 3, 6, 3), (4, 3, 5, 2)],
                         ids=["k=s", "k=2s", "k=2s-3", "k=5,s=2"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["first", "last"])
@torch.inference_mode()
def test_transposed_conv_as_gemm_equals_the_conv(c_in, c_out, kernel, stride, channels_last):
    """The GEMM form of the causal transposed conv, streamed in chunks (its history) and whole, equals
    torch's ConvTranspose1d; kernel 5 at stride 2 needs two frames of history. Channels-last: accumulated
    products per input frame, the output channels-last."""
    from tts_engine.model.codec_blocks import CausalConvTranspose1d, ConvCache

    torch.manual_seed(0)
    ref = CausalConvTranspose1d(c_in, c_out, kernel, stride).eval()
    gemm = copy.deepcopy(ref)
    gemm.fuse(channels_last=channels_last)
    assert (gemm.cl_blocks is not None) == channels_last
    assert gemm.gemm_weight.shape == (c_out * stride, (ref.history_len + 1) * c_in)
    ref.slot = gemm.slot = 0
    x = torch.randn(2, c_in, 9)
    whole = ref(x)
    assert torch.allclose(gemm(x), whole, atol=1e-5)
    cache_ref = ConvCache([torch.zeros(2, c_in, ref.history_len)])
    cache_gemm = ConvCache([torch.zeros(2, c_in, ref.history_len)])
    pieces = []
    for a, b in ((0, 1), (1, 3), (3, 9)):
        want = ref(x[:, :, a:b], cache_ref)
        got = gemm(x[:, :, a:b], cache_gemm)
        assert (got.transpose(1, 2) if channels_last else got).is_contiguous()
        assert torch.allclose(got, want, atol=1e-5)
        pieces.append(got)
    assert torch.allclose(torch.cat(pieces, dim=-1), whole, atol=1e-5)
    assert torch.equal(cache_gemm.history[0], cache_ref.history[0])
    gemm.fuse(False)
    assert gemm.gemm_weight is None and gemm.cl_blocks is None and torch.equal(gemm(x), whole)


@torch.inference_mode()
def test_channels_last_blocks_equal_channels_first_ones(device):
    """`use_fused_kernels(channels_last=...)`: the decoder blocks' activations channels-last (their dense convs
    cuDNN's NHWC ones) or channels-first give the same chunks and states, both the reference's; off, no
    channels-last weights remain."""
    from tts_engine.model.codec_blocks import DecoderBlock, ResidualUnit

    cfg, ref, last = _pair("tiny-speech_tokenizer", device)
    first = copy.deepcopy(ref).use_fused_kernels(channels_last=False)
    last.use_fused_kernels(channels_last=True)
    layouts = []
    for unit in (m for m in last.modules() if isinstance(m, ResidualUnit)):
        unit.register_forward_hook(lambda _m, _a, out: layouts.append(out.transpose(1, 2).is_contiguous()))
    blocks = [m for m in last.decoder if isinstance(m, DecoderBlock)]
    assert all(b.block[2].conv1.cl_weight is not None and b.block[1].cl_blocks is not None for b in blocks)
    assert last.decoder[0].cl_weight is None and last.pre_conv.cl_weight is None  # before the blocks
    assert last.decoder[-1].cl_weight is not None  # the last conv, one channel out
    codes = _codes(cfg, 5).to(device)
    states = {name: m.new_state(2) for name, m in (("ref", ref), ("first", first), ("last", last))}
    for a, b in ((0, 1), (1, 3), (3, 5)):
        want, _ = ref.decode_chunk(codes[:, :, a:b], states["ref"])
        got_first, _ = first.decode_chunk(codes[:, :, a:b], states["first"])
        got_last, _ = last.decode_chunk(codes[:, :, a:b], states["last"])
        assert torch.allclose(got_last, got_first, atol=2e-5, rtol=1e-4), (got_last - got_first).abs().max()
        assert torch.allclose(got_last, want, atol=2e-5, rtol=1e-4)
    assert layouts and all(layouts)
    assert (states["last"].rows - states["ref"].rows).abs().max() <= 2e-5 * (1 + states["ref"].rows.abs().max())
    last.use_fused_kernels(channels_last=False)
    assert all(getattr(m, "cl_weight", None) is None and getattr(m, "cl_blocks", None) is None
               for m in last.modules())


@torch.inference_mode()
def test_act1_inside_the_window_kernel_decodes_the_same(device, monkeypatch):
    """`use_fused_kernels(act_in_window=...)`: a residual unit's first SnakeBeta inside its dilated conv's window
    kernel gives the chunks and states of it on its own, and no residual unit runs act1 separately."""
    from tts_engine.model import codec_blocks

    cfg, _, inside = _pair("tiny-speech_tokenizer", device)
    apart = copy.deepcopy(inside).use_fused_kernels(act_in_window=False)
    fused_cats = []
    cat = codec_blocks.conv_history_cat
    monkeypatch.setattr(codec_blocks, "conv_history_cat",
                        lambda h, x, cl=False, snake=None: fused_cats.append(snake is not None) or cat(h, x, cl, snake))
    units = [m for m in inside.modules() if isinstance(m, codec_blocks.ResidualUnit)]
    separate = []
    for unit in units:
        unit.act1.register_forward_hook(lambda *_: separate.append(1))
    codes = _codes(cfg, 5).to(device)
    s_in, s_apart = inside.new_state(2), apart.new_state(2)
    for a, b in ((0, 1), (1, 3), (3, 5)):
        got, _ = inside.decode_chunk(codes[:, :, a:b], s_in)
        want, _ = apart.decode_chunk(codes[:, :, a:b], s_apart)
        assert torch.equal(got, want)
    assert torch.equal(s_in.rows, s_apart.rows)
    assert sum(fused_cats) == len(units) * 3 and separate == []  # every unit of `inside`, three chunks


@pytest.mark.parametrize("bias", [True, False])
@torch.inference_mode()
def test_pointwise_conv_as_gemm_equals_the_conv(bias):
    from tts_engine.model.codec_blocks import CausalConv1d

    torch.manual_seed(0)
    ref = CausalConv1d(6, 5, 1).eval()
    gemm = copy.deepcopy(ref)
    gemm.as_gemm = True
    x = torch.randn(3, 6, 11)
    got = gemm(x, bias=bias)
    assert got.is_contiguous() and torch.allclose(got, ref(x, bias=bias), atol=1e-6)
    assert not torch.allclose(ref(x, bias=True), ref(x, bias=False))  # the bias is really there


def test_gemm_convs_can_stay_with_cudnn():
    from tts_engine.model.codec_blocks import CausalConv1d, CausalConvTranspose1d

    _, _, fused = _pair("tiny-speech_tokenizer", torch.device("cpu"))
    transposed = [m for m in fused.modules() if isinstance(m, CausalConvTranspose1d)]
    convs = [m for m in fused.modules() if isinstance(m, CausalConv1d)]
    assert transposed and all(m.gemm_weight is not None for m in transposed) and all(m.as_gemm for m in convs)
    fused.use_fused_kernels(gemm_convs=False)
    assert all(m.gemm_weight is None for m in transposed) and not any(m.as_gemm for m in convs)
    assert fused.quantizer.table is not None


@pytest.mark.parametrize("kernel,dilation", [(3, 1), (7, 1), (7, 3), (7, 9)])
@pytest.mark.parametrize("bias", [True, False])
@torch.inference_mode()
def test_window_conv_as_gemm_equals_the_conv(kernel, dilation, bias):
    """A dense causal conv as one GEMM over its input windows, streamed in chunks (its history) and
    whole, equals torch's Conv1d; the history it leaves is the conv's."""
    from tts_engine.model.codec_blocks import CausalConv1d, ConvCache

    torch.manual_seed(0)
    ref = CausalConv1d(6, 5, kernel, dilation=dilation).eval()
    gemm = copy.deepcopy(ref)
    gemm.as_gemm, gemm.window_gemm_max = True, 1 << 30
    ref.slot = gemm.slot = 0
    x = torch.randn(2, 6, 40)
    whole = ref(x, bias=bias)
    assert torch.allclose(gemm(x, bias=bias), whole, atol=1e-5)
    caches = [ConvCache([torch.zeros(2, 6, ref.history_len)]) for _ in range(2)]
    pieces = []
    for a, b in ((0, 1), (1, 3), (3, 40)):
        want = ref(x[:, :, a:b], caches[0], bias=bias)
        got = gemm(x[:, :, a:b], caches[1], bias=bias)
        assert got.is_contiguous() and torch.allclose(got, want, atol=1e-5)
        pieces.append(got)
    assert torch.allclose(torch.cat(pieces, dim=-1), whole, atol=1e-5)
    assert torch.equal(caches[1].history[0], caches[0].history[0])


@torch.inference_mode()
def test_window_convs_decode_like_the_reference():
    """The whole decoder with its dense convs as window GEMMs (chunks and whole) equals the reference;
    only the depthwise convs are left with cuDNN."""
    from tts_engine.model.codec_blocks import CausalConv1d

    cfg, ref, fused = _pair("tiny-speech_tokenizer", torch.device("cpu"))
    fused.use_fused_kernels(window_max=1 << 40)
    convs = [m for m in fused.modules() if isinstance(m, CausalConv1d)]
    assert all(m.window_gemm_max == 1 << 40 for m in convs)
    assert any(m.history_len and m.conv.groups == 1 for m in convs)
    codes = _codes(cfg, 5)
    s_ref, s_fused = ref.new_state(2), fused.new_state(2)
    for a, b in ((0, 1), (1, 3), (3, 5)):
        want, s_ref = ref.decode_chunk(codes[:, :, a:b], s_ref)
        got, s_fused = fused.decode_chunk(codes[:, :, a:b], s_fused)
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (got - want).abs().max()
    assert torch.allclose(fused(codes), ref(codes), atol=2e-5, rtol=1e-4)
    fused.use_fused_kernels(window_max=0)
    assert not any(m.window_gemm_max for m in convs)
    with pytest.raises(ValueError, match="window_max"):
        fused.use_fused_kernels(window_max=-1)


@torch.inference_mode()
def test_a_conv_past_the_window_limit_goes_to_cudnn(monkeypatch):
    """The limit counts the windows' elements (batch x C_in x kernel x outputs): at it the conv is a
    GEMM, one element past it the conv goes to F.conv1d."""
    from tts_engine.model import codec_blocks
    from tts_engine.model.codec_blocks import CausalConv1d

    calls = []
    conv1d = codec_blocks.F.conv1d
    monkeypatch.setattr(codec_blocks.F, "conv1d", lambda *a, **k: calls.append(1) or conv1d(*a, **k))
    torch.manual_seed(0)
    conv = CausalConv1d(6, 5, 7, dilation=3)
    conv.as_gemm = True
    x = torch.randn(2, 6, 10)
    want = conv1d(torch.nn.functional.pad(x, (conv.history_len, 0)), conv.conv.weight, conv.conv.bias,
                  dilation=3)
    for limit, expect_calls in ((2 * 6 * 7 * 10, 0), (2 * 6 * 7 * 10 - 1, 1)):
        calls.clear()
        conv.window_gemm_max = limit
        assert torch.allclose(conv(x), want, atol=1e-5)
        assert len(calls) == expect_calls, limit


@pytest.mark.parametrize("name", ["tiny-speech_tokenizer", "speech_tokenizer"])
@torch.inference_mode()
def test_the_rope_kv_kernel_decodes_like_the_reference(device, name, monkeypatch):
    """The window transformer with its RoPE and K/V window in one kernel a layer (`rope_kv`), chunk by
    chunk past the window, equals the reference decoder; the kernel runs in every layer of every chunk."""
    import tts_engine.model.codec as codec_module

    cfg, ref, fused = _pair(name, device)
    fused.use_fused_kernels(rope_kv=True)
    assert fused.pre_transformer.rope_kv_kernel
    for m in fused.modules():  # SnakeBeta under the interpreter is minutes on the real config (see above)
        if type(m).__name__ == "SnakeBeta" and device.type == "cpu":
            m.fused = False
    calls, kernel = [], codec_module.codec_rope_kv
    monkeypatch.setattr(codec_module, "codec_rope_kv", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    window = cfg.decoder.sliding_window
    codes = _codes(cfg, window + 4, batch=2).to(device)
    s_ref, s_fused = ref.new_state(2), fused.new_state(2)
    for a, b in ((0, 1), (1, 3), (3, window - 2), (window - 2, window + 4)):
        want, s_ref = ref.decode_chunk(codes[:, :, a:b], s_ref)
        got, s_fused = fused.decode_chunk(codes[:, :, a:b], s_fused)
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (a, b, (got - want).abs().max())
    assert len(calls) == 4 * cfg.decoder.num_hidden_layers
    for g, w in zip(s_fused.tensors(), s_ref.tensors(), strict=True):
        assert (g.float() - w.float()).abs().max() <= 2e-5 * (1 + w.float().abs().max())
    fused.use_fused_kernels(rope_kv=False)
    assert not fused.pre_transformer.rope_kv_kernel
