"""Convolutional building blocks of the codec decoder, each usable whole or chunk by chunk.

Every block is causal with zero lookahead. Called with `cache=None` a block decodes a whole
sequence (zero left padding, as the reference does). Called with a `ConvCache` it continues a
stream: each causal conv reads and overwrites in place its fixed-size input history
`cache.history[slot]`, so decoding in chunks equals decoding at once.

Attribute names follow the official checkpoint, so `state_dict()` keys are the official names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels.backend import runs_on
from ..kernels.conv_window import conv_columns, conv_history_cat, conv_history_cat_ref, window_columns
from ..kernels.snake import as_channels_last, channels_last, residual_bias_add, snake_beta, snake_beta_ref


@dataclass
class ConvCache:
    """Left input history of every stateful conv, indexed by the conv's `slot`: [B, C_in, n]."""

    history: list[torch.Tensor]


class CausalConv1d(nn.Module):
    """Stride-1 conv padded on the left only; its state is the last (k-1)*dilation inputs."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.history_len = (kernel_size - 1) * dilation
        self.slot = -1  # assigned by the owning decoder when history_len > 0
        # Fast path (CodecDecoder.use_fused_kernels): a pointwise conv as one batched GEMM on the
        # channels-first activations, where cuDNN converted each input to NHWC first (29 of a small
        # call's kernels, ~9 us each); a wider (dense) conv too while its input windows laid side by
        # side (`window_columns`: k times the input) hold at most `window_gemm_max` elements (0:
        # never), past which copying them costs more than cuDNN.
        self.as_gemm = False
        self.window_gemm_max = 0
        # Fast path, streaming: the concatenation, history shift and (for a window GEMM) the columns as
        # one launch (kernels/conv_window.py) where Triton runs; off, torch's two or three copies.
        self.window_kernel = False
        # Fast path, channels-last (`set_channels_last`): activations [B, C, T] whose transpose(1, 2) is
        # contiguous, a dense conv as cuDNN's NHWC conv on them (torch converted channels-first inputs to NHWC
        # and the output back in every call: ~2 ms of a 32-stream 12-frame chunk), a pointwise one as a plain
        # GEMM of [B * T, C] rows. The weight [C_out, C_in, 1, k] in that layout, as cuDNN reads it.
        self.register_buffer("cl_weight", None, persistent=False)
        # Fast path: the activation before the conv (a residual unit's act1) inside the window kernel, one pass
        # over the activations fewer (`use_fused_kernels(act_in_window=...)`).
        self.act_in_window = False

    @torch.no_grad()
    def set_channels_last(self, on: bool) -> None:
        c = self.conv
        self.cl_weight = c.weight[:, :, None].contiguous(memory_format=torch.channels_last) if on else None

    def forward(self, x: torch.Tensor, cache: ConvCache | None = None, bias: bool = True,
                act: SnakeBeta | None = None) -> torch.Tensor:
        """bias False: the conv without its bias, for a caller that adds it in its next kernel. act: x through
        this activation first (inside the window kernel where it runs and `act_in_window`)."""
        n = self.history_len
        c = self.conv
        b, _, t = x.shape
        window_gemm = self.as_gemm and c.groups == 1 and (
            n == 0 or (self.cl_weight is None and b * c.in_channels * c.kernel_size[0] * t <= self.window_gemm_max))
        # The fast path's stream: concatenation, history shift (and the GEMM's columns) in one launch.
        kernel = n > 0 and cache is not None and self.window_kernel and runs_on(x.device)
        in_window = act is not None and act.fused and kernel and not window_gemm and self.act_in_window
        if act is not None and not in_window:
            x = act(x)
        if n > 0 and cache is None:
            x = F.pad(x, (n, 0))
        elif n > 0:
            history = cache.history[self.slot]
            if kernel and window_gemm:
                return self._gemm(conv_columns(history, x, c.kernel_size[0], c.dilation[0]), bias)
            if kernel:
                x = conv_history_cat(history, x, self.cl_weight is not None,
                                     (act.alpha, act.beta) if in_window else None)
            else:
                x = conv_history_cat_ref(history, x, self.cl_weight is not None)
        if window_gemm:
            return self._gemm(x if n == 0 else window_columns(x, c.kernel_size[0], c.dilation[0]), bias)
        if self.cl_weight is not None:  # [B, C, 1, T] channels-last in and out: no layout conversion
            return F.conv2d(as_channels_last(x)[:, :, None], self.cl_weight, c.bias if bias else None,
                            dilation=(1, c.dilation[0]))[:, :, 0]
        return F.conv1d(x, c.weight, c.bias if bias else None, c.stride, c.padding, c.dilation, c.groups)

    def _gemm(self, columns: torch.Tensor, bias: bool) -> torch.Tensor:
        """columns [B, C_in * k, t] (`window_columns`) -> the conv's output [B, C_out, t], channels-last where
        the columns are (a pointwise conv's input)."""
        c = self.conv
        w = c.weight.view(c.out_channels, -1)
        if channels_last(columns):
            return F.linear(columns.transpose(1, 2), w, c.bias if bias else None).transpose(1, 2)
        y = torch.matmul(w, columns)
        return y + c.bias[:, None] if bias else y


class CausalConvTranspose1d(nn.Module):
    """Upsampling by `stride`; the right `kernel - stride` outputs are dropped, which makes it causal.

    Output samples [i*stride, (i+1)*stride) depend on inputs i-m..i with m = ceil(k/stride) - 1,
    so the streaming state is the last m inputs (the overlap tail is recomputed from them, which
    keeps every state in this module an input history of fixed size).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.history_len = math.ceil(kernel_size / stride) - 1
        self.slot = -1
        # The fast path (`fuse`): non-persistent, so `.to()` moves them and the state dict keeps the
        # official keys only.
        self.register_buffer("gemm_weight", None, persistent=False)  # [C_out * stride, (m + 1) * C_in]
        self.register_buffer("gemm_bias", None, persistent=False)  # [C_out * stride]
        self.window_kernel = False  # as CausalConv1d's: the concatenation and history shift in one launch
        # Channels-last (`fuse(channels_last=True)`): the GEMM's rows reordered to r * C_out + o, so its output
        # [B, t, stride * C_out] is already [B, t * stride, C_out] (no interleave copy), and its columns split
        # per input frame, [m + 1, C_in, stride * C_out]: m + 1 accumulated products over shifted views of the
        # input (no copy of its windows).
        self.register_buffer("cl_blocks", None, persistent=False)
        self.register_buffer("cl_bias", None, persistent=False)  # [stride * C_out]

    @torch.no_grad()
    def fuse(self, on: bool = True, channels_last: bool = False) -> None:
        """The transposed conv as one GEMM, after the weights are loaded. Output frame tau (its `stride`
        samples) depends on input frames tau - m .. tau only, so it is a conv of kernel m + 1 over frames
        into C_out * stride channels, then the samples interleaved: row o * stride + r of the GEMM is
        sample r of channel o; its column block q reads frame tau - m + q through tap (m - q) * stride + r
        (zero past the kernel). cuDNN ran these as backward-data convs (its generic `dgrad` kernels, the
        largest item of a small call's profile, 0.23-0.30 ms)."""
        self.cl_blocks = self.cl_bias = None
        if not on:
            self.gemm_weight = self.gemm_bias = None
            return
        w = self.conv.weight  # [C_in, C_out, k]
        c_in, c_out, k = w.shape
        s, n = self.stride, self.history_len + 1
        taps = F.pad(w, (0, n * s - k))  # [C_in, C_out, n * s]
        blocks = [taps[:, :, (n - 1 - q) * s:(n - q) * s].permute(1, 2, 0).reshape(c_out * s, c_in) for q in range(n)]
        self.gemm_weight = torch.cat(blocks, dim=1).contiguous()
        self.gemm_bias = self.conv.bias.repeat_interleave(s)
        if channels_last:
            rows = self.gemm_weight.view(c_out, s, n, c_in).transpose(0, 1)  # [s, C_out, m + 1, C_in]
            self.cl_blocks = rows.permute(2, 3, 0, 1).reshape(n, c_in, s * c_out).contiguous()
            self.cl_bias = self.gemm_bias.view(c_out, s).t().reshape(-1).contiguous()

    def forward(self, x: torch.Tensor, cache: ConvCache | None = None) -> torch.Tensor:
        if self.gemm_weight is not None:
            return self._gemm_forward(x, cache)
        # The slices are made contiguous once here: the next block's SnakeBeta kernel would copy them
        # anyway, and the residual add after it read them strided (in a batch-8 call's profile 1.05
        # of its 6.56 ms went to strided, non-vectorized adds).
        out_len = x.shape[-1] * self.stride
        m = self.history_len
        if cache is None or m == 0:
            return self.conv(x)[..., :out_len].contiguous()
        x = conv_history_cat_ref(cache.history[self.slot], x)  # [B, C, m + t]
        skip = m * self.stride  # outputs that belong to the previous chunk, already emitted
        return self.conv(x)[..., skip : skip + out_len].contiguous()

    def _gemm_forward(self, x: torch.Tensor, cache: ConvCache | None) -> torch.Tensor:
        """x [B, C_in, t] -> [B, C_out, t * stride] through `fuse`'s GEMM (the same causal outputs)."""
        b, c_in, t = x.shape
        m = self.history_len
        if m and cache is None:
            x = F.pad(x, (m, 0))  # the reference's zero history
        elif m:  # [B, C_in, m + t], the history shifted (one launch with the window kernel)
            window = conv_history_cat if self.window_kernel and runs_on(x.device) else conv_history_cat_ref
            x = window(cache.history[self.slot], x, self.cl_blocks is not None)
        if self.cl_blocks is not None:
            return self._channels_last_forward(x, t)
        # Each output frame's m + 1 input frames side by side: [B, t, (m + 1) * C_in], one copy.
        frames = x.unfold(-1, m + 1, 1).permute(0, 2, 3, 1).reshape(b, t, (m + 1) * c_in)
        y = F.linear(frames, self.gemm_weight, self.gemm_bias)  # [B, t, C_out * stride]
        return y.view(b, t, -1, self.stride).permute(0, 2, 1, 3).reshape(b, -1, t * self.stride)

    def _channels_last_forward(self, x: torch.Tensor, t: int) -> torch.Tensor:
        """x [B, C_in, m + t] (history first, either layout) -> [B, C_out, t * stride], channels-last. Output frame
        tau reads input frames tau .. tau + m of x, so block q multiplies the view x[:, :, q:q + t]; batched
        products read strided views in place (the weights broadcast over the batch)."""
        b, blocks = x.shape[0], self.cl_blocks
        frames = x.transpose(1, 2)  # [B, m + t, C_in]
        y = torch.baddbmm(self.cl_bias.expand(b, t, -1), frames[:, :t], blocks[0].expand(b, -1, -1))
        for q in range(1, blocks.shape[0]):
            y.baddbmm_(frames[:, q:q + t], blocks[q].expand(b, -1, -1))
        return y.view(b, t * self.stride, -1).transpose(1, 2)  # rows r * C_out + o: sample r of channel o


class SnakeBeta(nn.Module):
    """x + sin^2(x * e^alpha) / e^beta, per channel; alpha and beta are stored as logs."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.fused = False  # one Triton kernel instead of the torch ops (CodecDecoder.use_fused_kernels)

    def forward(self, x: torch.Tensor, cache: ConvCache | None = None,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        """bias [C]: the activation of x + bias (the bias of a conv run without it)."""
        del cache  # pointwise in time: no state; the argument keeps block lists uniform
        if self.fused and runs_on(x.device):
            return snake_beta(x, self.alpha, self.beta, bias)
        return snake_beta_ref(x, self.alpha, self.beta, bias)


class ConvNeXtBlock(nn.Module):
    """Depthwise causal conv k7, LayerNorm, 4x pointwise MLP with GELU, scaled residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor, cache: ConvCache | None = None) -> torch.Tensor:
        h = self.dwconv(x, cache).transpose(1, 2)  # [B, C, T] -> [B, T, C]
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)  # back to [B, C, T]


class UpsampleStage(nn.ModuleList):
    """`upsample.i`: [0] transposed conv (kernel == stride, stateless), [1] ConvNeXt block."""

    def __init__(self, dim: int, factor: int):
        super().__init__([CausalConvTranspose1d(dim, dim, factor, factor), ConvNeXtBlock(dim)])

    def forward(self, x: torch.Tensor, cache: ConvCache | None = None) -> torch.Tensor:
        for block in self:
            x = block(x, cache)
        return x


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor, cache: ConvCache | None = None) -> torch.Tensor:
        if self.act1.fused and runs_on(x.device):
            # The convs' bias adds (broadcast kernels of their own after cuDNN) moved into the
            # kernels after them: conv1's into act2, conv2's into the residual add. 2 kernels fewer.
            h = self.conv1(x, cache, bias=False, act=self.act1)
            y = self.conv2(self.act2(h, bias=self.conv1.conv.bias), cache, bias=False)
            return residual_bias_add(x, y, self.conv2.conv.bias)
        h = self.conv1(self.act1(x), cache)
        return x + self.conv2(self.act2(h), cache)


class DecoderBlock(nn.Module):
    """`decoder.{1..4}`: SnakeBeta, x`rate` causal transposed conv (k = 2*rate), 3 residual units."""

    def __init__(self, in_dim: int, out_dim: int, rate: int):
        super().__init__()
        self.block = nn.ModuleList([
            SnakeBeta(in_dim),
            CausalConvTranspose1d(in_dim, out_dim, 2 * rate, rate),
            *(ResidualUnit(out_dim, dilation) for dilation in (1, 3, 9)),
        ])

    def forward(self, x: torch.Tensor, cache: ConvCache | None = None) -> torch.Tensor:
        for block in self.block:
            x = block(x, cache)
        return x


# ---- RVQ dequantiser -------------------------------------------------------------------------

class Codebook(nn.Module):
    """EMA codebook as trained: the row of code c is embedding_sum[c] / max(cluster_usage[c], eps)."""

    def __init__(self, size: int, dim: int, eps: float = 1e-5):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))
        self.eps = eps

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [...] -> [..., dim]. Gather first, divide after: same values, no full-table pass."""
        usage = F.embedding(codes, self.cluster_usage[:, None]).clamp(min=self.eps)  # [..., 1]
        return F.embedding(codes, self.embedding_sum) / usage


class _CodebookSlot(nn.Module):
    """Exists only to reproduce the official key path `vq.layers.i._codebook.*`."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self._codebook = Codebook(size, dim)


class _CodebookList(nn.Module):
    def __init__(self, count: int, size: int, dim: int):
        super().__init__()
        self.layers = nn.ModuleList(_CodebookSlot(size, dim) for _ in range(count))


class CodebookGroup(nn.Module):
    """Residual codebooks whose summed rows go through one 1x1 projection up to `out_dim`.

    `input_proj` is the encoder-side projection; decoding never uses it, the checkpoint has it.
    """

    def __init__(self, count: int, size: int, dim: int, out_dim: int):
        super().__init__()
        self.input_proj = nn.Conv1d(out_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, out_dim, 1, bias=False)
        self.vq = _CodebookList(count, size, dim)

    def projected_rows(self) -> torch.Tensor:
        """Every codebook's rows through `output_proj`, in fp32: [K, size, out_dim]."""
        rows = torch.stack([slot._codebook.embedding_sum.float()
                            / slot._codebook.cluster_usage.float().clamp(min=slot._codebook.eps)[:, None]
                            for slot in self.vq.layers])  # [K, size, dim]
        return rows @ self.output_proj.weight.float()[:, :, 0].T

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, K, T] -> [B, out_dim, T]."""
        summed = None
        for k, slot in enumerate(self.vq.layers):
            rows = slot._codebook.lookup(codes[:, k])  # [B, T, dim]
            summed = rows if summed is None else summed + rows
        return self.output_proj(summed.transpose(1, 2))  # [B, dim, T] -> [B, out_dim, T]


class SplitQuantizer(nn.Module):
    """Codebook 0 (semantic) and codebooks 1.. (acoustic) have separate output projections.

    Fused (`fuse()`, after the weights are loaded): the 1x1 projections are linear, so every
    codebook's rows are projected once, into one table [Q * size, codebook_dim], and a chunk's
    latent is one gather and one sum over codebooks (3 kernels instead of ~85 per call: the
    reference's per-codebook gathers, divisions and adds; each is a few microseconds of a small
    chunk's fixed cost on the GPU). Equal to the reference up to the order of fp32 rounding.
    """

    def __init__(self, num_quantizers: int, num_semantic: int, size: int, codebook_dim: int):
        super().__init__()
        if not 0 < num_semantic < num_quantizers:
            raise ValueError(f"need 0 < num_semantic ({num_semantic}) < num_quantizers ({num_quantizers})")
        self.num_semantic = num_semantic
        self.size = size
        dim = codebook_dim // 2
        self.rvq_first = CodebookGroup(num_semantic, size, dim, codebook_dim)
        self.rvq_rest = CodebookGroup(num_quantizers - num_semantic, size, dim, codebook_dim)
        # Non-persistent buffers, so `.to()` moves them and the state dict keeps the official keys only.
        self.register_buffer("table", None, persistent=False)  # [Q * size, codebook_dim] once fused
        self.register_buffer("offsets", None, persistent=False)  # [Q, 1]: codebook k's first row in it

    @torch.no_grad()
    def fuse(self, on: bool = True) -> None:
        """Build (or drop) the projected table, after the weights are loaded."""
        table = offsets = None
        if on:
            ref = self.rvq_first.output_proj.weight
            rows = torch.cat([self.rvq_first.projected_rows(), self.rvq_rest.projected_rows()])  # [Q, size, D]
            table = rows.reshape(-1, rows.shape[-1]).to(ref.dtype)
            offsets = torch.arange(rows.shape[0], device=ref.device)[:, None] * self.size
        self.table, self.offsets = table, offsets

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, num_quantizers, T] -> [B, codebook_dim, T]."""
        if self.table is not None:
            return F.embedding(codes + self.offsets, self.table).sum(1).transpose(1, 2)  # [B, Q, T, D] -> [B, D, T]
        n = self.num_semantic
        return self.rvq_first(codes[:, :n]) + self.rvq_rest(codes[:, n:])
