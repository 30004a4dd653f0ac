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
from .loading import load_checkpoint
from .prompt import Layout, VoiceSpec, assistant_text, build_prompt, instruct_text
from .reference import GenerationInput, generate_codes
from .sampling import SamplingParams
from .voices.clone import ClonePrompt
from .voices.encoder import VoiceEncoder

SAMPLE_RATE = 24000


@dataclass(frozen=True)
class Speech:
    codes: torch.Tensor  # [frames, 16] long
    pcm: np.ndarray  # [frames * 1920] float32 in [-1, 1]
    sample_rate: int = SAMPLE_RATE


class Synthesizer:
    def __init__(self, model_dir: str | Path, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype | None = None):
        ckpt = load_checkpoint(model_dir, device=device, dtype=dtype)
        self.path, self.cfg, self.codec_cfg, self.defaults = ckpt.path, ckpt.cfg, ckpt.codec_cfg, ckpt.defaults
        self.tokenizer, self.model, self.codec = ckpt.tokenizer, ckpt.model, ckpt.codec
        self.device = torch.device(device)
        self._voice_encoder: VoiceEncoder | None = None

    def clone_voice(self, wav: np.ndarray, ref_text: str | None = None) -> ClonePrompt:
        """A Base model's cloned voice from 24 kHz mono reference audio (see voices/clone.py); use it
        as `VoiceSpec(name, language, cloned=...)`."""
        if self._voice_encoder is None:
            self._voice_encoder = VoiceEncoder.from_checkpoint(self.path, device=self.device,
                                                               tokenizer=self.tokenizer)
        return self._voice_encoder.clone(wav, ref_text)

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
    def decode(self, codes: torch.Tensor, ref_codes: torch.Tensor | None = None) -> np.ndarray:
        """codes [T, 16] -> PCM. `ref_codes` (in-context cloning): decoded in front of the codes as
        the codec's left context, then cut off, as the reference implementation does (its cut is
        proportional to the length, kept as is so the samples match)."""
        if codes.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        full = codes if ref_codes is None else torch.cat((ref_codes.to(codes.device), codes))
        pcm = self.codec(full.T[None].to(self.device))[0].float().cpu().numpy()  # [1, 16, T] -> [T * 1920]
        if ref_codes is None:
            return pcm
        cut = int(ref_codes.shape[0] / max(full.shape[0], 1) * pcm.shape[0])
        return pcm[cut:]

    def synthesize(self, inputs: list[GenerationInput],
                   on_frame: Callable[[int], None] | None = None) -> list[Speech]:
        codes = generate_codes(self.model, inputs, on_frame=on_frame)
        return [Speech(c, self.decode(c, inp.prompt.clone.ref_codes if inp.prompt.clone else None))
                for c, inp in zip(codes, inputs, strict=True)]
