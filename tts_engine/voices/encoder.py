"""Reference audio -> ClonePrompt: the speaker encoder and the codec encoder of a Base checkpoint.

Loaded on its own from the checkpoint directory (fp32, any device), so the server can clone voices
beside a running engine without touching the engine's weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..config import CodecConfig, ModelConfig
from ..text import TextTokenizer
from ..weights import CheckpointError, load_into, safetensors_files
from .clone import ClonePrompt, ref_text_ids
from .codec_encoder import CodecEncoder
from .mel import SAMPLE_RATE, log_mel
from .speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig


class VoiceEncoder:
    def __init__(self, speaker_encoder: SpeakerEncoder, codec_encoder: CodecEncoder, tokenizer: TextTokenizer,
                 device: torch.device):
        self.speaker_encoder, self.codec_encoder = speaker_encoder, codec_encoder
        self.tokenizer, self.device = tokenizer, device

    @classmethod
    def from_checkpoint(cls, model_dir: str | Path, *, device: str | torch.device = "cpu",
                        tokenizer: TextTokenizer | None = None) -> VoiceEncoder:
        path = Path(model_dir)
        cfg = ModelConfig.from_file(path / "config.json")
        if cfg.tts_model_type != "base":
            raise CheckpointError(f"{path} is a {cfg.tts_model_type} model: voice cloning needs a Base model")
        device = torch.device(device)
        with torch.device("meta"):
            speaker = SpeakerEncoder(SpeakerEncoderConfig.from_model_config(cfg.raw))
        speaker = load_into(speaker, safetensors_files(path), prefix="speaker_encoder.", ignore_prefixes=("talker.",),
                            dtype=torch.float32, device=device)
        codec_dir = path / "speech_tokenizer"
        with torch.device("meta"):
            codec = CodecEncoder(CodecConfig.from_file(codec_dir / "config.json").encoder_raw)
        codec = load_into(codec, safetensors_files(codec_dir), prefix="encoder.", ignore_prefixes=("decoder.",),
                          dtype=torch.float32, device=device)
        return cls(speaker.eval(), codec.eval(), tokenizer or TextTokenizer.from_dir(path), device)

    @torch.inference_mode()
    def speaker_embedding(self, wav: np.ndarray) -> torch.Tensor:
        """wav [samples] float32 at 24 kHz -> [H] fp32 on the CPU."""
        x = torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)).to(self.device)
        return self.speaker_encoder(log_mel(x[None]))[0].float().cpu()

    @torch.inference_mode()
    def clone(self, wav: np.ndarray, ref_text: str | None = None) -> ClonePrompt:
        """`ref_text` given: in-context mode (speaker embedding + reference codes + transcript);
        otherwise speaker embedding only."""
        embedding = self.speaker_embedding(wav)
        if ref_text is None or not ref_text.strip():
            return ClonePrompt(embedding)
        codes = self.codec_encoder.encode(torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32))
                                          .to(self.device)).cpu()
        return ClonePrompt(embedding, codes, ref_text_ids(self.tokenizer, ref_text), ref_text)


__all__ = ["SAMPLE_RATE", "VoiceEncoder"]
