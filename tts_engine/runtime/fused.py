"""Fused weights and the per-step math of the fast path.

At load, each decoder layer's q/k/v projections become one [(Hq + 2 Hkv) D, H] matrix and
gate/up one [2 I, H] matrix: one GEMV instead of three (two) per layer, which matters because
at batch sizes up to dozens every projection is bound by reading its weights.
The math is the reference's (`model/layers.py`); tests check the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..model.layers import DecoderStack


@dataclass
class FusedLayer:
    w_qkv: torch.Tensor  # [(Hq + 2 Hkv) D, H]
    w_o: torch.Tensor  # [H, Hq D]
    w_gate_up: torch.Tensor  # [2 I, H]
    w_down: torch.Tensor  # [H, I]
    ln_in: torch.Tensor  # [H]
    ln_post: torch.Tensor  # [H]
    q_norm: torch.Tensor  # [D]
    k_norm: torch.Tensor  # [D]


@dataclass
class FusedStack:
    layers: list[FusedLayer]
    norm: torch.Tensor
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    inv_freq: torch.Tensor  # [D / 2] fp32

    @classmethod
    def from_stack(cls, stack: DecoderStack) -> FusedStack:
        cfg = stack.cfg
        layers = []
        for layer in stack.layers:
            a, m = layer.self_attn, layer.mlp
            layers.append(FusedLayer(
                w_qkv=torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)).contiguous(),
                w_o=a.o_proj.weight, w_gate_up=torch.cat((m.gate_proj.weight, m.up_proj.weight)).contiguous(),
                w_down=m.down_proj.weight, ln_in=layer.input_layernorm.weight,
                ln_post=layer.post_attention_layernorm.weight, q_norm=a.q_norm.weight, k_norm=a.k_norm.weight))
        device = stack.norm.weight.device
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float() / cfg.head_dim))
        return cls(layers, stack.norm.weight, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                   cfg.intermediate_size, cfg.rms_norm_eps, inv_freq)

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """x [..., T, heads, D] with positions [..., T]."""
    freqs = positions.float()[..., None] * inv_freq  # [..., T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype)[..., None, :], emb.sin().to(x.dtype)[..., None, :]
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def qkv(stack: FusedStack, layer: FusedLayer, x: torch.Tensor, positions: torch.Tensor):
    """x [..., T, H] -> q [..., T, Hq, D], k/v [..., T, Hkv, D] (normed, RoPE applied)."""
    h = rms_norm(x, layer.ln_in, stack.eps)
    q, k, v = F.linear(h, layer.w_qkv).split((stack.q_size, stack.kv_size, stack.kv_size), dim=-1)
    d = stack.head_dim
    q = rms_norm(q.unflatten(-1, (stack.num_heads, d)), layer.q_norm, stack.eps)
    k = rms_norm(k.unflatten(-1, (stack.num_kv_heads, d)), layer.k_norm, stack.eps)
    return rope(q, positions, stack.inv_freq), rope(k, positions, stack.inv_freq), v.unflatten(-1, (-1, d))


def finish_layer(stack: FusedStack, layer: FusedLayer, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """Residual + o_proj, then the SwiGLU MLP. attn [..., Hq * D]."""
    x = x + F.linear(attn, layer.w_o)
    gate, up = F.linear(rms_norm(x, layer.ln_post, stack.eps), layer.w_gate_up).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, layer.w_down)
