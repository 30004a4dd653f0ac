"""Qwen3-TTS 12 Hz: talker (codebook 0, one step per 80 ms frame) and code predictor (codebooks
1..15, 15 sequential steps per frame). Pure math: no requests, no sampling policy.

Module attribute paths equal the official checkpoint's tensor names (`talker.model.layers.0...`,
`talker.code_predictor.lm_head.3.weight`, ...), so a checkpoint loads with strict name checking.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..config import DecoderStackConfig, ModelConfig, TalkerConfig
from .layers import DecoderStack, LayerKV


class TextProjection(nn.Module):
    """text_hidden -> text_hidden -> talker hidden, SiLU, with biases."""

    def __init__(self, text_hidden: int, hidden: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(nn.functional.silu(self.linear_fc1(x)))


class TalkerStack(DecoderStack):
    def __init__(self, cfg: TalkerConfig):
        super().__init__(cfg)
        self.codec_embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_hidden_size)


class CodePredictorStack(DecoderStack):
    def __init__(self, cfg: DecoderStackConfig, talker_hidden: int):
        super().__init__(cfg)
        # Input tables for codebooks 1..15 live in talker space; they are also the talker's
        # feedback tables for those codebooks.
        self.codec_embedding = nn.ModuleList(
            nn.Embedding(cfg.vocab_size, talker_hidden) for _ in range(cfg.num_code_groups - 1))


# (logits [B, V] fp32, codebook index 1..15) -> codes [B]
CodebookSampler = Callable[[torch.Tensor, int], torch.Tensor]


class CodePredictor(nn.Module):
    def __init__(self, cfg: DecoderStackConfig, talker_hidden: int):
        super().__init__()
        self.cfg = cfg
        self.model = CodePredictorStack(cfg, talker_hidden)
        self.lm_head = nn.ModuleList(
            nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(cfg.num_code_groups - 1))
        # Identity when the talker and the predictor share a width (0.6B): no tensor in the file.
        self.small_to_mtp_projection = (
            nn.Linear(talker_hidden, cfg.hidden_size, bias=True)
            if talker_hidden != cfg.hidden_size else nn.Identity())

    def predict(self, talker_hidden: torch.Tensor, c0_embed: torch.Tensor,
                sample: CodebookSampler) -> torch.Tensor:
        """One frame. talker_hidden, c0_embed [B, H_talker] -> codes of codebooks 1..15 [B, 15].

        Fresh cache per frame: prefill [h, C(c0)] at positions 0, 1; then one position per
        codebook. The cache never holds more than 16 positions.
        """
        b = talker_hidden.shape[0]
        cache = self.model.new_cache()
        x = self.small_to_mtp_projection(torch.stack((talker_hidden, c0_embed), dim=1))  # [B, 2, h]
        positions = torch.arange(2, device=x.device).expand(b, 2)
        hidden = self.model(x, positions, cache)[:, -1]
        codes = []
        for j in range(self.cfg.num_code_groups - 1):
            code = sample(self.lm_head[j](hidden).float(), j + 1)
            codes.append(code)
            if j == self.cfg.num_code_groups - 2:
                break
            x = self.small_to_mtp_projection(self.model.codec_embedding[j](code))[:, None]  # [B, 1, h]
            positions = torch.full((b, 1), j + 2, device=x.device)
            hidden = self.model(x, positions, cache)[:, -1]
        return torch.stack(codes, dim=1)


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig):
        super().__init__()
        self.cfg = cfg
        self.model = TalkerStack(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, cfg.hidden_size)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.code_predictor, cfg.hidden_size)

    def text_embed(self, text_ids: torch.Tensor) -> torch.Tensor:
        """Text track: [...] ids -> [..., H]."""
        return self.text_projection(self.model.text_embedding(text_ids))

    def codec_embed(self, codec_ids: torch.Tensor) -> torch.Tensor:
        """Codec track (codebook 0 and control ids): [...] ids -> [..., H]."""
        return self.model.codec_embedding(codec_ids)

    def feedback_embed(self, codes: torch.Tensor) -> torch.Tensor:
        """A finished frame fed back into the next talker step: codes [B, 16] -> [B, H]."""
        x = self.codec_embed(codes[:, 0])
        for j, table in enumerate(self.code_predictor.model.codec_embedding):
            x = x + table(codes[:, j + 1])
        return x

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: list[LayerKV] | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, H] -> (final-norm hidden [B, T, H], codebook-0 logits [B, T, 3072])."""
        hidden = self.model(x, positions, cache, mask)
        return hidden, self.codec_head(hidden)


class Qwen3TTS(nn.Module):
    """Top-level module: `state_dict()` keys are the checkpoint's `model.safetensors` names. A Base
    checkpoint also holds `speaker_encoder.*`, which tts_engine/voices/ loads on its own: the
    talker never runs it."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.talker = Talker(cfg.talker)
