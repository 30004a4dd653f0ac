"""Offline synthesis on the reference path: checkpoint directory in, codes and 24 kHz PCM out.

This is what `cadence say` runs, and the CPU path of the engine. It owns the loaded pieces
(config, talker, codec decoder, text tokenizer) and turns user-level arguments into
`GenerationInput`s for the reference loop.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .checkpoint import speech_frames
from .config import CodecConfig, ModelConfig, SamplingDefaults
from .model.codec import CodecDecoder
from .model.qwen3_tts import Qwen3TTS
from .prompt import Layout, VoiceSpec, assistant_text, build_prompt, instruct_text
from .reference import GenerationInput, generate_codes
from .sampling import SamplingParams
from .text import TextTokenizer
from .weights import CheckpointError, load_into, safetensors_files

SAMPLE_RATE = 24000


@dataclass(frozen=True)
class Speech:
    codes: torch.Tensor  # [frames, 16] long
    pcm: np.ndarray  # [frames * 1920] float32 in [-1, 1]
    sample_rate: int = SAMPLE_RATE


def load_model_dir(model_dir: str | Path) -> tuple[Path, ModelConfig]:
    path = Path(model_dir)
    if not path.is_dir():
        raise CheckpointError(f"model directory {path} does not exist")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} is not a Qwen3-TTS checkpoint: config.json is missing")
    return path, ModelConfig.from_file(path / "config.json")


class Synthesizer:
    def __init__(self, model_dir: str | Path, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype | None = None):
        self.path, self.cfg = load_model_dir(model_dir)
        self.device = torch.device(device)
        self.defaults = SamplingDefaults.from_file(self.path / "generation_config.json")
        self.tokenizer = TextTokenizer.from_dir(self.path)
        with torch.device("meta"):
            model = Qwen3TTS(self.cfg)
        self.model = load_into(model, safetensors_files(self.path), dtype=dtype, device=self.device).eval()
        codec_dir = self.path / "speech_tokenizer"
        if not (codec_dir / "config.json").exists():
            raise CheckpointError(f"{codec_dir}/config.json is missing")
        self.codec_cfg = CodecConfig.from_file(codec_dir / "config.json")
        with torch.device("meta"):
            codec = CodecDecoder(self.codec_cfg.decoder)
        # The codec stays fp32 (as shipped): its SnakeBeta and long conv chains are precision-sensitive.
        self.codec = load_into(codec, safetensors_files(codec_dir), prefix="decoder.",
                               ignore_prefixes=("encoder.",), device=self.device).eval()

    def prepare(self, text: str, voice: VoiceSpec, *, layout: Layout = Layout.NON_STREAMING,
                params: SamplingParams | None = None, max_frames: int | None = None) -> GenerationInput:
        """Validate and tokenise one utterance. Raises ValueError with a user-facing message."""
        if not text or not text.strip():
            raise ValueError("text is empty")
        params = (params or SamplingParams.from_defaults(self.defaults)).validate()
        instruct_ids = None
        if voice.instruct:
            instruct_ids = self.tokenizer.encode(instruct_text(voice.instruct))
        prompt = build_prompt(self.cfg, self.tokenizer.encode(assistant_text(text)), voice, layout,
                              instruct_ids)
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        forced = None
        if self.cfg.is_random:
            forced = speech_frames(text, float(self.cfg.random_weights.get("chars_per_second", 14.5)))
        limit = max_frames if max_frames is not None else self.defaults.max_new_tokens
        return GenerationInput(prompt, params, seed, limit, forced)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> np.ndarray:
        if codes.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        pcm = self.codec(codes.T[None].to(self.device))  # [1, 16, T] -> [1, T * 1920]
        return pcm[0].float().cpu().numpy()

    def synthesize(self, inputs: list[GenerationInput],
                   on_frame: Callable[[int], None] | None = None) -> list[Speech]:
        codes = generate_codes(self.model, inputs, on_frame=on_frame)
        return [Speech(c, self.decode(c)) for c in codes]
