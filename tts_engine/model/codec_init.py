"""Random codec weights in the official layout (`decoder.*` + `encoder.*`), for tests and benchmarks.

Decoding random codes with these weights must give audible, unclipped audio, so timing runs
exercise real numerics (no denormals, no constant clipping) and listeners hear something.
Weights are variance-preserving (std 1/sqrt(fan_in)). Learned per-channel gains (LayerScale,
ConvNeXt gamma, SnakeBeta alpha/beta, norm weights) get random non-trivial values instead of their
training-start constants (ConvNeXt gamma starts at 1e-6, which would switch that branch off and
hide it from parity tests). The last conv is scaled (and made DC-free) so that the output sits
near -20 dBFS.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..config import CodecConfig
from .codec import CodecDecoder, LayerScale, RMSNorm
from .codec_blocks import CodebookGroup, ConvNeXtBlock, ResidualUnit, SnakeBeta
from .codec_encoder_spec import encoder_tensor_shapes

# Std of the final conv's weights relative to 1/sqrt(fan_in), measured so that random codes give
# about -20 dBFS on both the real and the tiny config (tests/model/test_codec.py checks > -45).
_OUTPUT_GAIN = 0.04
# Gain of the last conv of each residual branch: trained residual branches add a fraction of the
# signal, while unit gain would grow the signal ~3x per decoder block (~80x overall).
_RESIDUAL_GAIN = 0.3


def _normal(shape: tuple[int, ...], std: float, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=gen) * std


def _uniform(shape: tuple[int, ...], low: float, high: float, gen: torch.Generator) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape, generator=gen)


def _fan_in(module: nn.Module) -> int:
    w = module.weight
    if isinstance(module, nn.ConvTranspose1d):
        # Weight [C_in, C_out, k]: each output sample sums C_in * k / stride products.
        return w.shape[0] * w.shape[2] // module.stride[0]
    return math.prod(w.shape[1:])


def _decoder_tensors(decoder: CodecDecoder, gen: torch.Generator) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    final_conv = decoder.decoder[-1].conv
    gains = {final_conv: _OUTPUT_GAIN}
    for module in decoder.modules():
        if isinstance(module, ResidualUnit):
            gains[module.conv2.conv] = _RESIDUAL_GAIN
    for name, module in decoder.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.ConvTranspose1d)):
            gain = gains.get(module, 1.0)
            out[prefix + "weight"] = _normal(module.weight.shape, gain / math.sqrt(_fan_in(module)), gen)
            if module.bias is not None:
                out[prefix + "bias"] = _normal(module.bias.shape, 0.02, gen)
            if module is final_conv:
                # SnakeBeta's sin^2 term has a positive mean; zero-sum taps keep it out of the
                # waveform (a DC offset would eat headroom and clip).
                w = out[prefix + "weight"]
                out[prefix + "weight"] = w - w.mean()
                out[prefix + "bias"] = torch.zeros_like(out[prefix + "bias"])
        elif isinstance(module, CodebookGroup):
            # Non-trivial usage counts, so a missing division would show up in parity tests;
            # rows (sum / usage) get std 1/sqrt(count), so each group's summed rows have std 1.
            std = 1.0 / math.sqrt(len(module.vq.layers))
            for i, slot in enumerate(module.vq.layers):
                book = slot._codebook
                usage = _uniform(book.cluster_usage.shape, 0.5, 2.0, gen)
                out[f"{prefix}vq.layers.{i}._codebook.cluster_usage"] = usage
                rows = _normal(book.embedding_sum.shape, std, gen)
                out[f"{prefix}vq.layers.{i}._codebook.embedding_sum"] = rows * usage[:, None]
        elif isinstance(module, SnakeBeta):
            out[prefix + "alpha"] = _normal(module.alpha.shape, 0.1, gen)
            out[prefix + "beta"] = _normal(module.beta.shape, 0.1, gen)
        elif isinstance(module, ConvNeXtBlock):
            out[prefix + "gamma"] = _uniform(module.gamma.shape, 0.05, 0.15, gen)
        elif isinstance(module, LayerScale):
            out[prefix + "scale"] = _uniform(module.scale.shape, 0.05, 0.15, gen)
        elif isinstance(module, RMSNorm | nn.LayerNorm):
            out[prefix + "weight"] = 1.0 + _normal(module.weight.shape, 0.1, gen)
            if getattr(module, "bias", None) is not None:
                out[prefix + "bias"] = _normal(module.bias.shape, 0.02, gen)
    return out


def _encoder_tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("initialized", "cluster_usage"):
        return torch.ones(shape)
    if leaf == "scale":  # LayerScale
        return torch.full(shape, 0.01)
    if leaf == "embed_sum":
        return _normal(shape, 1.0, gen)
    if "layernorm" in name:
        return torch.ones(shape) if leaf == "weight" else torch.zeros(shape)
    if leaf == "bias":
        return torch.zeros(shape)
    return _normal(shape, 1.0 / math.sqrt(math.prod(shape[1:])), gen)


def random_codec_state_dict(cfg: CodecConfig, seed: int) -> dict[str, torch.Tensor]:
    """Complete fp32 speech-tokenizer state dict; the same seed always gives the same tensors."""
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        decoder = CodecDecoder(cfg.decoder)
    tensors = {f"decoder.{k}": v for k, v in _decoder_tensors(decoder, gen).items()}
    expected = {k: tuple(v.shape) for k, v in decoder.state_dict().items()}
    produced = {k.removeprefix("decoder."): tuple(v.shape) for k, v in tensors.items()}
    if produced != expected:
        raise RuntimeError(f"random init does not cover the decoder: {set(expected) ^ set(produced)}")
    for name, shape in encoder_tensor_shapes(cfg.encoder_raw).items():
        tensors[f"encoder.{name}"] = _encoder_tensor(name, shape, gen)
    return tensors


def random_codec_decoder(cfg: CodecConfig, seed: int = 0) -> CodecDecoder:
    """The decoder half of `random_codec_state_dict(cfg, seed)` loaded into a CodecDecoder (CPU,
    fp32, eval): for tests and benchmarks that need the codec without a checkpoint on disk."""
    weights = {k.removeprefix("decoder."): v for k, v in random_codec_state_dict(cfg, seed).items()
               if k.startswith("decoder.")}
    with torch.device("meta"):
        decoder = CodecDecoder(cfg.decoder)
    decoder.load_state_dict(weights, strict=True, assign=True)
    return decoder.eval()
