"""Codec decoder: 16 codebooks at 12.5 Hz -> 24 kHz PCM, whole or as a stream of chunks.

Data flow (shapes for the real config, t frames):
  codes [B, 16, t] -> RVQ rows summed, 1x1 projections -> [B, 512, t]
  -> causal conv k3 -> [B, 1024, t] -> sliding-window transformer (window 72) -> [B, 1024, t]
  -> 2 x (x2 transposed conv + ConvNeXt) -> [B, 1024, 4t] -> causal conv k7 -> [B, 1536, 4t]
  -> 4 decoder blocks (x8, x5, x4, x3) -> [B, 96, 1920t] -> SnakeBeta, conv k7 -> clamp -> [B, 1920t]

Everything is causal with zero lookahead, so streaming is exact: `decode_chunk` keeps the last
`sliding_window - 1` keys/values per layer and every conv's left input history in a
`CodecState` of fixed-size tensors, and the samples of frame t are final as soon as frame t's
codes arrive. `forward` is the whole-sequence reference the streaming path is tested against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import CodecDecoderConfig
from ..kernels.backend import runs_on
from ..kernels.codec_rope_kv import codec_rope_kv, codec_rope_kv_ref
from ..kernels.qk_norm_rope import rotate_half
from ..kernels.rms_norm import add_rms_norm, add_rms_norm_ref, rms_norm, rms_norm_ref
from ..kernels.silu_mul import silu_mul, silu_mul_ref
from .codec_blocks import (
    CausalConv1d,
    CausalConvTranspose1d,
    ConvCache,
    DecoderBlock,
    SnakeBeta,
    SplitQuantizer,
    UpsampleStage,
)
from .layers import RMSNorm


@dataclass
class CodecState(ConvCache):
    """Streaming state of a batch of codec rows; every tensor has a fixed shape.

    history: per stateful conv, its last inputs [B, C_in, n] (see `ConvCache`).
    frames:  [B] int64, frames decoded so far per row = RoPE position of the next frame.
    keys, values: [num_layers, B, kv_heads, sliding_window - 1, head_dim], oldest slot first;
             slot i holds position frames - (sliding_window - 1) + i, negative positions are
             empty (masked). `sliding_window - 1` because a frame attends to itself plus the
             previous `sliding_window - 1` frames.
    rows:    [B, row_size]: keys, values and every history are views of it (`CodecDecoder.state_of`),
             so a row's whole float state moves as one slice (the codec runner's gather and scatter:
             two kernels a call instead of ~70).
    `decode_chunk` updates these tensors in place (their addresses never change).
    """

    frames: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    rows: torch.Tensor

    def tensors(self) -> list[torch.Tensor]:
        return [self.frames, self.keys, self.values, *self.history]


# ---- sliding-window transformer ----------------------------------------------------------------

class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE. x [B, heads, t, D]; cos/sin [B, 1, t, D]."""
    return x * cos + rotate_half(x) * sin


class WindowAttention(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                kv_cache: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """x [B, t, hidden]; mask [B, 1, t, cached + t] (True = attend); kv_cache updated in place."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, t, D]
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if kv_cache is not None:
            k_cache, v_cache = kv_cache  # [B, Hkv, S, D], S = window - 1
            k = torch.cat([k_cache, k], dim=2)  # [B, Hkv, S + t, D]
            v = torch.cat([v_cache, v], dim=2)
            k_cache.copy_(k[:, :, -k_cache.shape[2]:])
            v_cache.copy_(v[:, :, -v_cache.shape[2]:])
        if self.num_kv_heads != self.num_heads:
            k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
            v = v.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim**-0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))  # [B, t, H*D]


@dataclass
class _FusedLayer:
    """One layer's weights packed for the fused path: [q; k; v] and [gate; up] concatenated, each
    layer scale folded into the projection before it (scale * (W x) = (scale[:, None] * W) x)."""

    qkv: torch.Tensor  # [(H + 2 Hkv) * D, hidden]
    o: torch.Tensor  # [hidden, H * D]
    gate_up: torch.Tensor  # [2 I, hidden]
    down: torch.Tensor  # [hidden, I]
    post_norm: torch.Tensor  # [hidden]


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.self_attn = WindowAttention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x, cos, sin, mask, kv_cache):
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask, kv_cache))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class WindowTransformer(nn.Module):
    """`pre_transformer`: latent -> hidden, causal sliding-window layers, final norm, -> latent.

    Fused (`fuse()`): per layer one qkv GEMM, RoPE on q and k at once, o with its layer scale
    folded in, the residual add fused into the next RMSNorm (Triton `add_rms_norm` where it runs,
    else its torch reference), one gate/up GEMM and `silu_mul`: ~19 kernels a layer instead of
    ~40. At a 1-2 frame chunk every kernel is a few rows, so the count is the cost.
    """

    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.fused: list[_FusedLayer] | None = None
        # Fused and continuing a stream: RoPE and the K/V window in one kernel a layer
        # (kernels/codec_rope_kv.py), where Triton runs; `use_fused_kernels(rope_kv=...)`.
        self.rope_kv_kernel = False

    @torch.no_grad()
    def fuse(self, on: bool = True) -> None:
        """Pack the layers' weights (copies: the modules keep the official parameters), after the
        weights are loaded; `.to()` packs them again (`_apply`). Off: `fuse(False)`."""
        self.fused = None if not on else [_FusedLayer(
            qkv=torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                           layer.self_attn.v_proj.weight]),
            o=layer.self_attn_layer_scale.scale[:, None] * layer.self_attn.o_proj.weight,
            gate_up=torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
            down=layer.mlp_layer_scale.scale[:, None] * layer.mlp.down_proj.weight,
            post_norm=layer.post_attention_layernorm.weight) for layer in self.layers]

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        if self.fused is not None:  # the packed copies follow the parameters' new device / dtype
            self.fuse()
        return out

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, t] -> cos, sin [B, 1, t, D], computed in fp32 then cast (as the reference)."""
        d = self.cfg.head_dim
        exponent = torch.arange(0, d, 2, device=positions.device).float() / d
        inv_freq = 1.0 / (self.cfg.rope_theta**exponent)  # [D/2]
        angles = positions.float()[..., None] * inv_freq  # [B, t, D/2]
        angles = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, t, D]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, x: torch.Tensor, state: CodecState | None) -> torch.Tensor:
        """x [B, t, latent] -> [B, t, latent]; frames before x come from `state` (None: none)."""
        b, t, _ = x.shape
        h = self.input_proj(x)
        steps = torch.arange(t, device=x.device)
        if state is None:
            start = torch.zeros(b, dtype=torch.long, device=x.device)
            cached = 0
        else:
            start, cached = state.frames, state.keys.shape[3]
        q_pos = start[:, None] + steps  # [B, t]
        k_pos = start[:, None] - cached + torch.arange(cached + t, device=x.device)  # [B, cached + t]
        # Key kp is visible from query qp iff qp - window < kp <= qp (the reference's sliding
        # window counts the query itself); negative kp are empty cache slots.
        delta = q_pos[:, :, None] - k_pos[:, None, :]  # [B, t, cached + t]
        mask = ((delta >= 0) & (delta < self.cfg.sliding_window) & (k_pos[:, None, :] >= 0))[:, None]
        cos, sin = self._rope(q_pos, h.dtype)
        if self.fused is not None:
            # additive once a call: SDPA turns a boolean mask into one in every layer (3 kernels each)
            bias = torch.full(mask.shape, float("-inf"), dtype=h.dtype, device=h.device).masked_fill_(mask, 0.0)
            return self.output_proj(self._fused_layers(h, cos, sin, bias, state))
        for i, layer in enumerate(self.layers):
            kv_cache = None if state is None else (state.keys[i], state.values[i])
            h = layer(h, cos, sin, mask, kv_cache)
        return self.output_proj(self.norm(h))

    def _fused_layers(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
                      state: CodecState | None) -> torch.Tensor:
        """x [B, t, hidden] -> the final norm of the last layer's output [B, t, hidden]; bias [B, 1, t, S]: the
        window mask, additive (0 / -inf)."""
        kernels = runs_on(x.device)
        norm, add_norm, act = (rms_norm, add_rms_norm, silu_mul) if kernels else \
            (rms_norm_ref, add_rms_norm_ref, silu_mul_ref)
        cfg, b, t = self.cfg, x.shape[0], x.shape[1]
        heads, kv_heads, d, eps = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps
        # RoPE and the K/V window: one launch instead of nine where the kernel may run
        rope_kv = codec_rope_kv if state is not None and kernels and self.rope_kv_kernel else codec_rope_kv_ref
        h = norm(x, self.layers[0].input_layernorm.weight, eps)
        for i, w in enumerate(self.fused):
            windows = (None, None) if state is None else (state.keys[i], state.values[i])  # [B, Hkv, S, D]
            q, k, v = rope_kv(F.linear(h, w.qkv), cos, sin, *windows, heads, kv_heads)
            if kv_heads != heads:
                k = k.repeat_interleave(heads // kv_heads, dim=1)
                v = v.repeat_interleave(heads // kv_heads, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=d**-0.5)
            x, h = add_norm(x, F.linear(out.transpose(1, 2).reshape(b, t, -1), w.o), w.post_norm, eps)
            mlp = F.linear(act(F.linear(h, w.gate_up)), w.down)
            after = self.layers[i + 1].input_layernorm.weight if i + 1 < len(self.fused) else self.norm.weight
            x, h = add_norm(x, mlp, after, eps)
        return h


# ---- decoder ---------------------------------------------------------------------------------

class CodecDecoder(nn.Module):
    """The official `Qwen3TTSTokenizerV2Decoder` with identical parameter names, plus streaming."""

    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.samples_per_frame = cfg.samples_per_frame
        self.pre_transformer = WindowTransformer(cfg)
        # The reference decoder always splits off exactly one semantic codebook, whatever
        # `num_semantic_quantizers` says.
        self.quantizer = SplitQuantizer(cfg.num_quantizers, 1, cfg.codebook_size, cfg.codebook_dim)
        self.pre_conv = CausalConv1d(cfg.codebook_dim, cfg.latent_dim, 3)
        self.upsample = nn.ModuleList(UpsampleStage(cfg.latent_dim, r) for r in cfg.upsampling_ratios)
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList([
            CausalConv1d(cfg.latent_dim, dims[0], 7),
            *(DecoderBlock(dims[i], dims[i + 1], r) for i, r in enumerate(cfg.upsample_rates)),
            SnakeBeta(dims[-1]),
            CausalConv1d(dims[-1], 1, 7),
        ])
        # Shapes [C_in, n] of every conv input history, in slot order.
        self._history_shapes: list[tuple[int, int]] = []
        for module in self.modules():
            if isinstance(module, (CausalConv1d, CausalConvTranspose1d)) and module.history_len > 0:
                module.slot = len(self._history_shapes)
                self._history_shapes.append((module.conv.in_channels, module.history_len))

    def use_fused_kernels(self, on: bool = True, *, gemm_convs: bool = True, window_max: int | None = None,
                          rope_kv: bool | None = None, conv_windows: bool | None = None,
                          channels_last: bool | None = None, act_in_window: bool | None = None) -> CodecDecoder:
        """The fast path, after the weights are loaded and cast: SnakeBeta as one Triton kernel
        (kernels/snake.py) where Triton runs on the weights' device, the quantizer's projected table,
        the transformer's packed layers, and the transposed and pointwise convs as GEMMs
        (`gemm_convs=False` leaves those to cuDNN, for comparison); the dense convs of kernel 3 and 7
        as well while their input windows hold at most `window_max` elements (0: cuDNN always; the
        depthwise ones stay with cuDNN); `rope_kv`: the window transformer's RoPE and K/V window as one
        kernel a layer; `conv_windows`: each streaming conv's input window (concatenation, history shift,
        columns) in one launch; `channels_last`: the activations channels-last from the first decoder block's
        transposed conv to the last conv (kernels/snake.py; the dense convs there cuDNN's NHWC ones, never
        window GEMMs); `act_in_window`: a residual unit's first SnakeBeta inside its dilated conv's window
        kernel. None: `FastPathOptions`' codec_* default, the one place kernel defaults live. Off, every op is
        the torch reference."""
        from ..runtime.options import FastPathOptions  # a leaf module of dataclasses: no cycle

        defaults = FastPathOptions()
        window_max = defaults.codec_window_max if window_max is None else window_max
        rope_kv = defaults.codec_rope_kv if rope_kv is None else rope_kv
        conv_windows = defaults.codec_conv_windows if conv_windows is None else conv_windows
        channels_last = defaults.codec_channels_last if channels_last is None else channels_last
        act_in_window = defaults.codec_act_in_window if act_in_window is None else act_in_window
        if window_max < 0:
            raise ValueError(f"window_max must be >= 0, got {window_max}")
        # Channels-last from the first decoder block's transposed conv to the last conv (decoder.6, one channel out)
        in_blocks = {id(m) for block in self.decoder[1:] for m in block.modules()}
        for module in self.modules():
            cl = on and gemm_convs and channels_last and id(module) in in_blocks
            if isinstance(module, SnakeBeta):
                module.fused = on
            elif isinstance(module, CausalConvTranspose1d):
                module.fuse(on and gemm_convs, channels_last=cl)
                module.window_kernel = on and gemm_convs and conv_windows
            elif isinstance(module, CausalConv1d):
                module.as_gemm = on and gemm_convs
                module.window_gemm_max = window_max if on and gemm_convs else 0
                module.window_kernel = on and gemm_convs and conv_windows
                module.set_channels_last(cl and module.history_len > 0 and module.conv.groups == 1)
                module.act_in_window = on and gemm_convs and conv_windows and act_in_window
        self.quantizer.fuse(on)
        self.pre_transformer.fuse(on)
        self.pre_transformer.rope_kv_kernel = on and rope_kv
        return self

    def _kv_row_shape(self) -> tuple[int, int, int, int]:
        cfg = self.cfg
        return cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.sliding_window - 1, cfg.head_dim

    @property
    def state_row_size(self) -> int:
        """Floats of one stream's state row: keys, values, then every conv history in slot order."""
        return 2 * math.prod(self._kv_row_shape()) + sum(c * n for c, n in self._history_shapes)

    def state_of(self, rows: torch.Tensor, frames: torch.Tensor) -> CodecState:
        """The state whose float tensors are views of rows [B, state_row_size]; frames [B]."""
        b, kv = rows.shape[0], self._kv_row_shape()
        views, start = [], 0
        for shape in (kv, kv, *self._history_shapes):
            size = math.prod(shape)
            views.append(rows[:, start:start + size].view(b, *shape))
            start += size
        keys, values = (v.transpose(0, 1) for v in views[:2])  # [B, L, ...] -> [L, B, ...]
        return CodecState(history=views[2:], frames=frames, keys=keys, values=values, rows=rows)

    def new_state(self, batch: int, device: torch.device | str | None = None,
                  dtype: torch.dtype | None = None) -> CodecState:
        """Zeroed state for `batch` fresh streams (zeros = the reference's left padding)."""
        ref = self.pre_conv.conv.weight
        device = ref.device if device is None else device
        dtype = ref.dtype if dtype is None else dtype
        return self.state_of(torch.zeros(batch, self.state_row_size, device=device, dtype=dtype),
                             torch.zeros(batch, dtype=torch.long, device=device))

    def state_after(self, context: torch.Tensor) -> CodecState:
        """Fresh streams whose left context is `context` [B, num_quantizers, t] (an in-context cloned voice's
        reference codes), decoded and its PCM dropped: the next chunk continues the reference utterance, sample for
        sample what a whole decode of reference + new codes gives past the reference's t * 1920 samples."""
        state = self.new_state(context.shape[0])
        if context.shape[2]:
            self.decode_chunk(context, state)
        return state

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, num_quantizers, T] (int64, 0..codebook_size-1) -> PCM [B, T * 1920] in [-1, 1]."""
        return self._decode(codes, None)

    def decode_chunk(self, codes: torch.Tensor, state: CodecState) -> tuple[torch.Tensor, CodecState]:
        """Continue the streams in `state` by codes [B, num_quantizers, t] -> PCM [B, t * 1920].

        The state is updated in place and returned; cost depends on t only, not on the history.
        """
        if state.frames.shape[0] != codes.shape[0]:
            raise ValueError(f"state holds {state.frames.shape[0]} rows, codes have {codes.shape[0]}")
        pcm = self._decode(codes, state)
        state.frames.add_(codes.shape[2])
        return pcm, state

    def _decode(self, codes: torch.Tensor, state: CodecState | None) -> torch.Tensor:
        if codes.dim() != 3 or codes.shape[1] != self.cfg.num_quantizers:
            raise ValueError(f"codes must be [B, {self.cfg.num_quantizers}, T], got {tuple(codes.shape)}")
        h = self.quantizer(codes)  # [B, codebook_dim, t]
        h = self.pre_conv(h, state).transpose(1, 2)  # [B, t, latent]
        h = self.pre_transformer(h, state).transpose(1, 2)  # [B, latent, t]
        for stage in self.upsample:
            h = stage(h, state)  # [B, latent, t * prod(upsampling_ratios)]
        for block in self.decoder:
            h = block(h, state)  # ends as [B, 1, t * samples_per_frame]
        return h[:, 0].clamp(-1.0, 1.0)
