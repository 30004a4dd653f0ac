"""Codec decoder: parity with the official decoder, exact streaming, checkpoint layout, audibility."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from tts_engine.config import CONFIG_DIR, CodecConfig
from tts_engine.model.codec import CodecDecoder
from tts_engine.model.codec_encoder_spec import encoder_tensor_shapes
from tts_engine.model.codec_init import random_codec_state_dict

TOL = 1e-4
TINY, REAL = "tiny-speech_tokenizer", "speech_tokenizer"


def _raw(name: str) -> dict:
    return json.loads((CONFIG_DIR / f"{name}.config.json").read_text())


def _config(name: str) -> CodecConfig:
    return CodecConfig.from_file(CONFIG_DIR / f"{name}.config.json")


def _decoder_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("decoder."): v for k, v in state.items() if k.startswith("decoder.")}


def _codes(frames: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, 16, frames), generator=torch.Generator().manual_seed(seed))


# 80 frames > sliding window 72: the window edge is part of every comparison against the official.
TINY_CODES = _codes(80, batch=1)


def _dbfs(pcm: torch.Tensor) -> float:
    return 20 * math.log10(pcm.float().pow(2).mean().sqrt().item() + 1e-12)


@pytest.fixture(scope="module")
def official_codec():
    from tests.official import install_import_stubs, official_available

    if not official_available():
        pytest.skip("official qwen-tts package not installed")
    install_import_stubs()
    from qwen_tts.core.tokenizer_12hz import (
        configuration_qwen3_tts_tokenizer_v2 as configuration,
    )
    from qwen_tts.core.tokenizer_12hz import (
        modeling_qwen3_tts_tokenizer_v2 as modeling,
    )

    return configuration, modeling


def _official_decoder(official_codec, name: str, weights: dict[str, torch.Tensor]):
    from transformers.modeling_utils import no_init_weights  # skip an init we overwrite anyway

    configuration, modeling = official_codec
    cfg = configuration.Qwen3TTSTokenizerV2DecoderConfig(**_raw(name)["decoder_config"])
    cfg._attn_implementation = "sdpa"
    with no_init_weights():
        decoder = modeling.Qwen3TTSTokenizerV2Decoder(cfg)
    decoder.load_state_dict(weights, strict=True)
    return decoder.eval()


def _ours(name: str, weights: dict[str, torch.Tensor]) -> CodecDecoder:
    with torch.device("meta"):  # our decoder has no buffers: every tensor comes from `weights`
        decoder = CodecDecoder(_config(name).decoder)
    decoder.load_state_dict(weights, strict=True, assign=True)
    return decoder.eval()


@pytest.fixture(scope="module")
def tiny_weights():
    return _decoder_weights(random_codec_state_dict(_config(TINY), 0))


@pytest.fixture(scope="module")
def real_state():
    return random_codec_state_dict(_config(REAL), 0)


@pytest.fixture(scope="module")
def real_weights(real_state):
    return _decoder_weights(real_state)


@pytest.fixture(scope="module")
def tiny_official_pcm(official_codec, tiny_weights):
    """The official decode of TINY_CODES, [1, T * 1920]."""
    with torch.inference_mode():
        return _official_decoder(official_codec, TINY, tiny_weights)(TINY_CODES)[:, 0]


@pytest.fixture(scope="module")
def tiny(tiny_weights):
    return _ours(TINY, tiny_weights)


@torch.inference_mode()
def _max_diff(ours: CodecDecoder, codes: torch.Tensor, reference: torch.Tensor) -> float:
    pcm = ours(codes)
    assert pcm.shape == reference.shape
    return (pcm - reference).abs().max().item()


# ---- layout --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [TINY, REAL])
def test_decoder_state_dict_equals_official(official_codec, name):
    configuration, modeling = official_codec
    with torch.device("meta"):
        theirs = modeling.Qwen3TTSTokenizerV2Decoder(
            configuration.Qwen3TTSTokenizerV2DecoderConfig(**_raw(name)["decoder_config"]))
        ours = CodecDecoder(CodecConfig.from_dict(_raw(name)).decoder)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in theirs.state_dict().items()}


@pytest.mark.parametrize("name", [TINY, REAL])
def test_random_checkpoint_has_complete_official_layout(official_codec, name, request):
    configuration, modeling = official_codec
    raw = _raw(name)
    with torch.device("meta"):
        theirs = modeling.Qwen3TTSTokenizerV2Model(configuration.Qwen3TTSTokenizerV2Config(**raw))
    official = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    encoder = {k.removeprefix("encoder."): v for k, v in official.items() if k.startswith("encoder.")}
    assert encoder_tensor_shapes(raw["encoder_config"]) == encoder
    state = request.getfixturevalue("real_state") if name == REAL else random_codec_state_dict(
        CodecConfig.from_dict(raw), seed=0)
    assert {k: tuple(v.shape) for k, v in state.items()} == official
    assert all(v.dtype == torch.float32 for v in state.values())


def test_official_model_loads_random_checkpoint_strictly(official_codec):
    configuration, modeling = official_codec
    raw = _raw(TINY)
    model = modeling.Qwen3TTSTokenizerV2Model(configuration.Qwen3TTSTokenizerV2Config(**raw))
    model.load_state_dict(random_codec_state_dict(CodecConfig.from_dict(raw), seed=3), strict=True)


def test_random_state_dict_is_deterministic_per_seed():
    cfg = _config(TINY)
    a, b, c = (random_codec_state_dict(cfg, s) for s in (5, 5, 6))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["decoder.pre_conv.conv.weight"], c["decoder.pre_conv.conv.weight"])


# ---- parity with the official decoder ------------------------------------------------------

def test_full_decode_equals_official_tiny(tiny, tiny_official_pcm):
    assert _max_diff(tiny, TINY_CODES, tiny_official_pcm) <= TOL


def test_full_decode_equals_official_real_config(official_codec, real_weights):
    codes = _codes(6, batch=1)
    with torch.inference_mode():
        reference = _official_decoder(official_codec, REAL, real_weights)(codes)[:, 0]
    assert _max_diff(_ours(REAL, real_weights), codes, reference) <= TOL


@pytest.mark.parametrize("tensor", [
    "quantizer.rvq_rest.vq.layers.7._codebook.cluster_usage",
    "pre_transformer.layers.1.self_attn.k_proj.weight",
    "upsample.1.1.dwconv.conv.weight",
    "decoder.3.block.3.act1.alpha",
    "decoder.6.conv.bias",
])
def test_parity_check_fails_when_one_weight_changes(tiny, tiny_official_pcm, tensor):
    perturbed = copy.deepcopy(tiny)
    with torch.no_grad():
        param = perturbed.get_parameter(tensor)
        # For the codebook, change the row of a code that is actually used.
        index = TINY_CODES[0, 8, 0].item() if "cluster_usage" in tensor else 0
        param.view(-1)[index] += 0.5
    assert _max_diff(perturbed, TINY_CODES, tiny_official_pcm) > 10 * TOL


# ---- streaming -----------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", [[1], [1, 2, 4, 8, 12], [5, 70, 3], [80]],
                         ids=["single-frames", "growing", "mixed", "one-chunk"])
@torch.inference_mode()
def test_chunked_decode_equals_full_decode(tiny, schedule):
    frames = 80  # > 72: the K/V window wraps
    codes = _codes(frames)
    full = tiny(codes)
    state = tiny.new_state(codes.shape[0])
    layout = [(t.shape, t.dtype, t.data_ptr()) for t in state.tensors()]
    pieces, start, i = [], 0, 0
    while start < frames:
        n = min(schedule[i % len(schedule)], frames - start)
        pcm, state = tiny.decode_chunk(codes[:, :, start : start + n], state)
        assert pcm.shape == (codes.shape[0], n * 1920)
        # Bounded state: same tensors, same shapes, updated in place.
        assert [(t.shape, t.dtype, t.data_ptr()) for t in state.tensors()] == layout
        pieces.append(pcm)
        start, i = start + n, i + 1
    assert (torch.cat(pieces, dim=-1) - full).abs().max().item() <= TOL
    assert state.frames.tolist() == [frames] * codes.shape[0]


@torch.inference_mode()
def test_chunked_decode_works_in_bf16(tiny):
    model = copy.deepcopy(tiny).to(torch.bfloat16)
    codes = _codes(12)
    full = model(codes).float()
    state = model.new_state(2)
    pieces = [model.decode_chunk(codes[:, :, i : i + 3], state)[0] for i in range(0, 12, 3)]
    chunked = torch.cat(pieces, dim=-1).float()
    assert chunked.isfinite().all()
    # bf16 rounding differs between split points; the signals must still agree closely.
    assert (chunked - full).pow(2).mean().sqrt() < 0.1 * full.pow(2).mean().sqrt()


def test_decode_rejects_wrong_codebook_count(tiny):
    with pytest.raises(ValueError, match="codes must be"):
        tiny(torch.zeros(1, 15, 4, dtype=torch.long))


# ---- audibility of random weights ----------------------------------------------------------

def _assert_audible(pcm: torch.Tensor) -> None:
    assert pcm.isfinite().all()
    assert _dbfs(pcm) > -45.0
    assert (pcm.abs() >= 0.999).float().mean().item() < 0.05


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.inference_mode()
def test_random_codes_are_audible_tiny(tiny, dtype):
    _assert_audible(copy.deepcopy(tiny).to(dtype)(_codes(25)).float())


@torch.inference_mode()
def test_random_codes_are_audible_real_config_bf16(real_weights):
    model = _ours(REAL, real_weights).to(torch.bfloat16)
    # One frame: bf16 convolutions are ~20x slower than fp32 on CPU.
    _assert_audible(model(_codes(1, batch=1)).float())
