"""The Base models' speaker encoder (ECAPA-TDNN): log-mel frames -> one speaker embedding.

The embedding has the talker's width and takes the place of a built-in speaker's codec row in the
prompt. Attribute paths equal the checkpoint's `speaker_encoder.*` tensor names. Every conv pads
"same" by reflection, as the checkpoint was trained with.

  mel [B, T, 128] -> TDNN(k5) -> 3 x SE-Res2Net (k3, dilation 2,3,4) -> concat the 3 block outputs
  -> TDNN(k1) "mfa" -> attentive statistics pooling (weighted mean and std over T) -> 1x1 conv
  -> embedding [B, enc_dim]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    enc_dim: int
    mel_dim: int = 128
    enc_channels: list[int] = field(default_factory=lambda: [512, 512, 512, 512, 1536])
    enc_kernel_sizes: list[int] = field(default_factory=lambda: [5, 3, 3, 3, 1])
    enc_dilations: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 1])
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_model_config(cls, raw: dict[str, Any]) -> SpeakerEncoderConfig:
        """From a Base checkpoint's config.json (its `speaker_encoder_config` block)."""
        block = dict(raw.get("speaker_encoder_config") or {})
        block.setdefault("enc_dim", 1024)  # the official config class's default
        known = {f for f in cls.__dataclass_fields__}
        c = cls(**{k: v for k, v in block.items() if k in known})
        if not len(c.enc_channels) == len(c.enc_kernel_sizes) == len(c.enc_dilations) >= 3:
            raise ValueError("speaker_encoder_config: enc_channels, enc_kernel_sizes and enc_dilations "
                             "must have one entry per layer (at least 3)")
        if sum(c.enc_channels[1:-1]) != c.enc_channels[-1]:
            raise ValueError("speaker_encoder_config: the last of enc_channels must be the sum of the "
                             "SE-Res2Net block widths (their outputs are concatenated)")
        return c


def _conv(c_in: int, c_out: int, kernel: int = 1, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(c_in, c_out, kernel, dilation=dilation, padding="same", padding_mode="reflect")


class TDNN(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = _conv(c_in, c_out, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Res2Net(nn.Module):
    """Channels split into `scale` groups; group i > 0 goes through its TDNN after adding the
    previous group's output (group 1 has no predecessor), widening the receptive field."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        self.scale = scale
        width = channels // scale
        self.blocks = nn.ModuleList(TDNN(width, width, kernel, dilation) for _ in range(scale - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(torch.chunk(x, self.scale, dim=1))
        out = [parts[0]]
        prev = None
        for i, block in enumerate(self.blocks, start=1):
            prev = block(parts[i] if prev is None else parts[i] + prev)
            out.append(prev)
        return torch.cat(out, dim=1)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = _conv(channels, se_channels)
        self.conv2 = _conv(se_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, cfg: SpeakerEncoderConfig, kernel: int, dilation: int):
        super().__init__()
        self.tdnn1 = TDNN(c_in, c_out, 1, 1)
        self.res2net_block = Res2Net(c_out, cfg.enc_res2net_scale, kernel, dilation)
        self.tdnn2 = TDNN(c_out, c_out, 1, 1)
        self.se_block = SqueezeExcite(c_out, cfg.enc_se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


def _mean_std(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted mean and std over time: x, weights [B, C, T] (weights sum to 1) -> 2 x [B, C]."""
    mean = (weights * x).sum(dim=2)
    var = (weights * (x - mean[:, :, None]).pow(2)).sum(dim=2)
    return mean, var.clamp(min=1e-12).sqrt()


class AttentiveStatsPool(nn.Module):
    """Attention over time conditioned on the global mean and std; -> [B, 2C] (mean, std)."""

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TDNN(channels * 3, attention_channels, 1, 1)
        self.conv = _conv(attention_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[2]
        mean, std = _mean_std(x, torch.full_like(x, 1.0 / t))
        context = torch.cat((x, mean[:, :, None].expand(-1, -1, t), std[:, :, None].expand(-1, -1, t)), dim=1)
        attention = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        return torch.cat(_mean_std(x, attention), dim=1)


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        ch, ks, dl = cfg.enc_channels, cfg.enc_kernel_sizes, cfg.enc_dilations
        self.blocks = nn.ModuleList([TDNN(cfg.mel_dim, ch[0], ks[0], dl[0])])
        for i in range(1, len(ch) - 1):
            self.blocks.append(SERes2NetBlock(ch[i - 1], ch[i], cfg, ks[i], dl[i]))
        self.mfa = TDNN(sum(ch[1:-1]), ch[-1], ks[-1], dl[-1])
        self.asp = AttentiveStatsPool(ch[-1], cfg.enc_attention_channels)
        self.fc = _conv(ch[-1] * 2, cfg.enc_dim)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [B, T, mel_dim] -> embedding [B, enc_dim]."""
        x = mel.transpose(1, 2)
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs[1:], dim=1))
        return self.fc(self.asp(x)[:, :, None])[:, :, 0]
