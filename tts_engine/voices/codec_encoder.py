"""The speech tokenizer's encoder: 24 kHz audio -> 16 codebooks at 12.5 Hz (reference codes).

The official encoder is a Mimi model without its decoder half. Attribute paths equal the
checkpoint's `encoder.*` tensor names in `speech_tokenizer/model.safetensors`.

  wav [B, 1, S] -> SEANet: causal convs, per stride (4, 5, 6, 8) a residual block + ELU + strided
  conv doubling the channels, ELU, conv to `hidden`                        -> [B, hidden, S / 960]
  -> transformer at 25 Hz (pre-norm LayerNorm, RoPE, causal attention over every earlier frame,
     GELU MLP, LayerScale on both residual branches). The config's `sliding_window` (250) is not
     applied: the official encoder (transformers' Mimi) builds a plain causal mask, and the codes
     of references longer than 10 s differ if the window is applied.
  -> causal stride-2 conv with edge-replicating padding                   -> [B, hidden, S / 1920]
  -> split residual VQ: codebook 0 quantises the semantic projection, codebooks 1..15 the
     acoustic projection residually; each picks the nearest centroid (Euclidean).
Every conv is causal: left padding of (kernel - stride), and right padding only to complete the
last stride.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..model.codec_encoder_spec import encoder_settings, frame_rates

NUM_CODEBOOKS = 16  # the talker's codebooks; the checkpoint's quantizer holds 32


class CausalConv(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1, dilation: int = 1,
                 bias: bool = True, pad_mode: str = "constant"):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.span = (kernel - 1) * dilation + 1
        self.left = self.span - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = math.ceil((length - self.span + self.left) / self.stride + 1) - 1
        right = frames * self.stride + self.span - self.left - length
        return self.conv(F.pad(x, (self.left, right), mode=self.pad_mode))


class ResidualUnit(nn.Module):
    """x + conv1x1(ELU(conv_k(ELU(x)))); list indices 0 and 2 are the (tensor-less) ELUs."""

    def __init__(self, channels: int, c: dict[str, Any]):
        super().__init__()
        hidden = channels // c["compress"]
        self.block = nn.ModuleList([nn.ELU(), CausalConv(channels, hidden, c["residual_kernel_size"]),
                                    nn.ELU(), CausalConv(hidden, channels, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for layer in self.block:
            y = layer(y)
        return x + y


class SEANetEncoder(nn.Module):
    def __init__(self, c: dict[str, Any]):
        super().__init__()
        if c["num_residual_layers"] != 1 or c["use_conv_shortcut"] or not c["use_causal_conv"]:
            raise ValueError("encoder_config: only the official SEANet shape (one causal residual unit "
                             "per stride, no conv shortcut) is supported")
        channels = c["num_filters"]
        layers: list[nn.Module] = [CausalConv(c["audio_channels"], channels, c["kernel_size"])]
        for ratio in reversed(c["upsampling_ratios"]):
            layers += [ResidualUnit(channels, c), nn.ELU(), CausalConv(channels, 2 * channels, 2 * ratio, ratio)]
            channels *= 2
        layers += [nn.ELU(), CausalConv(channels, c["hidden_size"], c["last_kernel_size"])]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: dict[str, Any]):
        super().__init__()
        hidden, bias = c["hidden_size"], c["attention_bias"]
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c["head_dim"] or hidden // self.heads
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # [B, h, T, d]
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, c: dict[str, Any]):
        super().__init__()
        if c["hidden_act"] != "gelu":
            raise ValueError(f"encoder_config: hidden_act {c['hidden_act']!r} is not supported (gelu is)")
        self.fc1 = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.fc2 = nn.Linear(c["intermediate_size"], c["hidden_size"], bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class LayerScale(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class TransformerLayer(nn.Module):
    def __init__(self, c: dict[str, Any]):
        super().__init__()
        hidden = c["hidden_size"]
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = nn.LayerNorm(hidden, eps=c["norm_eps"])
        self.post_attention_layernorm = nn.LayerNorm(hidden, eps=c["norm_eps"])
        self.self_attn_layer_scale = LayerScale(hidden)
        self.mlp_layer_scale = LayerScale(hidden)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class Transformer(nn.Module):
    def __init__(self, c: dict[str, Any]):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(c) for _ in range(c["num_hidden_layers"]))
        self.head_dim = c["head_dim"] or c["hidden_size"] // c["num_attention_heads"]
        self.theta = float(c["rope_theta"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, hidden] -> [B, T, hidden]."""
        t = x.shape[1]
        pos = torch.arange(t, device=x.device, dtype=torch.float32)
        inv_freq = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, device=x.device).float() / self.head_dim)
        angles = torch.outer(pos, inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # [T, d]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        mask = pos[None, :] <= pos[:, None]  # [T, T] causal
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return x


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def centroids(self) -> torch.Tensor:
        return self.embed_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class VQLayer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = Codebook(size, dim)


class ResidualVQ(nn.Module):
    def __init__(self, count: int, c: dict[str, Any]):
        super().__init__()
        dim = c["vector_quantization_hidden_dimension"]
        self.layers = nn.ModuleList(VQLayer(c["codebook_size"], c["codebook_dim"] or c["hidden_size"])
                                    for _ in range(count))
        if dim != c["hidden_size"]:
            self.input_proj = nn.Conv1d(c["hidden_size"], dim, 1, bias=False)
            self.output_proj = nn.Conv1d(dim, c["hidden_size"], 1, bias=False)  # decoder side only
        else:
            self.input_proj = self.output_proj = None

    def encode(self, x: torch.Tensor, count: int) -> torch.Tensor:
        """x [B, hidden, T] -> codes [B, T, count]: nearest centroid of the running residual."""
        if self.input_proj is not None:
            x = self.input_proj(x)
        residual = x.transpose(1, 2)  # [B, T, dim]
        codes = []
        for layer in self.layers[:count]:
            centroids = layer.codebook.centroids()
            dist = torch.cdist(residual.float(), centroids[None].float())  # [B, T, size]
            idx = dist.argmin(dim=-1)
            residual = residual - F.embedding(idx, centroids)
            codes.append(idx)
        return torch.stack(codes, dim=-1)


class SplitRVQ(nn.Module):
    def __init__(self, c: dict[str, Any]):
        super().__init__()
        semantic = c["num_semantic_quantizers"]
        self.semantic_residual_vector_quantizer = ResidualVQ(semantic, c)
        self.acoustic_residual_vector_quantizer = ResidualVQ(c["num_quantizers"] - semantic, c)
        self.semantic = semantic

    def encode(self, x: torch.Tensor, count: int) -> torch.Tensor:
        first = self.semantic_residual_vector_quantizer.encode(x, self.semantic)
        rest = self.acoustic_residual_vector_quantizer.encode(x, count - self.semantic)
        return torch.cat((first, rest), dim=-1)


class CodecEncoder(nn.Module):
    def __init__(self, encoder_raw: dict[str, Any]):
        super().__init__()
        c = encoder_settings(encoder_raw)
        if c["num_quantizers"] < NUM_CODEBOOKS:
            raise ValueError(f"encoder_config: {c['num_quantizers']} quantizers, the talker needs {NUM_CODEBOOKS}")
        self.encoder = SEANetEncoder(c)
        self.encoder_transformer = Transformer(c)
        rate, seanet_rate = frame_rates(c)
        self.downsample = None
        if rate != seanet_rate:
            self.downsample = CausalConv(c["hidden_size"], c["hidden_size"], 2 * int(seanet_rate / rate), 2,
                                         bias=False, pad_mode="replicate")
        self.quantizer = SplitRVQ(c)
        self.samples_per_frame = round(c["sampling_rate"] / rate)

    @torch.inference_mode()
    def encode(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [S] float at 24 kHz -> codes [ceil(S / 1920), 16] long."""
        x = self.encoder(wav.reshape(1, 1, -1).to(self.quantizer.semantic_residual_vector_quantizer
                                                       .layers[0].codebook.embed_sum.dtype))
        x = self.encoder_transformer(x.transpose(1, 2)).transpose(1, 2)
        if self.downsample is not None:
            x = self.downsample(x)
        codes = self.quantizer.encode(x, NUM_CODEBOOKS)[0]  # [T, 16]
        return codes[: -(-wav.numel() // self.samples_per_frame)]
