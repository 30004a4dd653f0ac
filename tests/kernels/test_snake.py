"""SnakeBeta as one kernel equals the model's torch form, alone and inside the codec's decode."""

from __future__ import annotations

import copy

import pytest
import torch

from tts_engine.kernels.snake import snake_beta, snake_beta_ref


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 7, 1100), (3, 2, 16)])
def test_snake_beta_equals_reference(device, shape, dtype, tol):
    g = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(shape, generator=g) * 2).to(device, dtype)
    alpha = (torch.randn(shape[1], generator=g) * 0.5).to(device, dtype)  # logs of the frequency
    beta = (torch.randn(shape[1], generator=g) * 0.5).to(device, dtype)
    got, want = snake_beta(x, alpha, beta), snake_beta_ref(x, alpha, beta)
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    err = ((got.float() - want.float()).abs() / (1 + want.float().abs())).max().item()
    assert err <= tol, f"snake {shape} {dtype}: relative error {err:.2e}"


def test_snake_beta_reads_a_strided_input(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 9, 4, generator=g).to(device).transpose(1, 2)  # [2, 4, 9], not contiguous
    alpha, beta = torch.randn(4, generator=g).to(device), torch.randn(4, generator=g).to(device)
    assert torch.allclose(snake_beta(x, alpha, beta), snake_beta_ref(x, alpha, beta), atol=1e-5, rtol=1e-5)


def test_snake_beta_rejects_a_channel_mismatch(device):
    with pytest.raises(ValueError, match="channels"):
        snake_beta(torch.zeros(1, 3, 4, device=device), torch.zeros(2, device=device), torch.zeros(2, device=device))


def test_codec_chunks_with_the_fused_snake_equal_the_reference(device):
    """The incremental decode of the tiny codec, SnakeBeta fused, equals the all-torch decode."""
    from tts_engine.config import CONFIG_DIR, CodecConfig
    from tts_engine.model.codec_init import random_codec_decoder

    cfg = CodecConfig.from_file(CONFIG_DIR / "tiny-speech_tokenizer.config.json")
    ref = random_codec_decoder(cfg).to(device)
    fused = copy.deepcopy(ref).use_fused_kernels()
    assert all(m.fused for m in fused.modules() if type(m).__name__ == "SnakeBeta")
    codes = torch.randint(0, cfg.decoder.codebook_size, (2, cfg.decoder.num_quantizers, 5),
                          generator=torch.Generator().manual_seed(1)).to(device)
    with torch.inference_mode():
        s_ref, s_fused = ref.new_state(2), fused.new_state(2)
        for a, b in ((0, 2), (2, 5)):
            want, s_ref = ref.decode_chunk(codes[:, :, a:b], s_ref)
            got, s_fused = fused.decode_chunk(codes[:, :, a:b], s_fused)
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), (got - want).abs().max()
