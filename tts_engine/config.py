"""Configuration dataclasses parsed from the official checkpoint files.

`config.json` (talker + code predictor + prompt ids), `speech_tokenizer/config.json` (codec) and
`generation_config.json` (sampling defaults). Every id the prompt builder needs is read from
these files; nothing about the vocabulary is hard-coded in the model code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


def _pick(cls, source: dict[str, Any], **overrides):
    """Build dataclass `cls` from the keys of `source` it declares; unknown keys are ignored."""
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in source.items() if k in names}
    kwargs.update(overrides)
    return cls(**kwargs)


@dataclass(frozen=True)
class DecoderStackConfig:
    """A Qwen3-style decoder stack (talker or code predictor)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    vocab_size: int = 2048
    num_code_groups: int = 16


@dataclass(frozen=True)
class TalkerConfig(DecoderStackConfig):
    text_hidden_size: int = 2048
    text_vocab_size: int = 151936
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    codec_language_id: dict[str, int] = field(default_factory=dict)
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, str | bool] = field(default_factory=dict)
    code_predictor: DecoderStackConfig | None = None


@dataclass(frozen=True)
class ModelConfig:
    """Top-level `config.json` of a Qwen3-TTS 12 Hz checkpoint."""

    talker: TalkerConfig
    tts_model_type: str  # "custom_voice" | "voice_design" | "base"
    tts_model_size: str  # "1b7" | "0b6"
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    assistant_token_id: int = 77091
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673
    tts_pad_token_id: int = 151671
    # Random-weight checkpoints made by `cadence make-checkpoint` carry this block; real
    # checkpoints do not. See tts_engine/checkpoint.py.
    random_weights: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_random(self) -> bool:
        return self.random_weights is not None

    @property
    def speakers(self) -> list[str]:
        return sorted(self.talker.spk_id)

    @property
    def languages(self) -> list[str]:
        """Languages a user may ask for: `auto` plus every non-dialect language id."""
        return ["auto", *sorted(k for k in self.talker.codec_language_id if "dialect" not in k)]

    @property
    def supports_instruct(self) -> bool:
        # The reference drops instructions for the 0.6B CustomVoice model.
        return self.tts_model_size != "0b6"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        if raw.get("model_type") != "qwen3_tts":
            raise ValueError(f"config.json has model_type {raw.get('model_type')!r}, expected 'qwen3_tts'")
        talker_raw = raw["talker_config"]
        cp = _pick(DecoderStackConfig, talker_raw["code_predictor_config"])
        talker = _pick(TalkerConfig, talker_raw, code_predictor=cp)
        return _pick(cls, raw, talker=talker, raw=raw)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class CodecDecoderConfig:
    """`decoder_config` of `speech_tokenizer/config.json`."""

    codebook_size: int = 2048
    codebook_dim: int = 512
    latent_dim: int = 1024
    decoder_dim: int = 1536
    hidden_size: int = 512
    intermediate_size: int = 1024
    num_hidden_layers: int = 8
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 64
    num_quantizers: int = 16
    num_semantic_quantizers: int = 1
    vector_quantization_hidden_dimension: int = 512
    layer_scale_initial_scale: float = 0.01
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 72
    max_position_embeddings: int = 8000
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)

    @property
    def samples_per_frame(self) -> int:
        n = 1
        for r in (*self.upsample_rates, *self.upsampling_ratios):
            n *= r
        return n


@dataclass(frozen=True)
class CodecConfig:
    """`speech_tokenizer/config.json`. The encoder part is kept raw: the engine never encodes."""

    decoder: CodecDecoderConfig
    encoder_raw: dict[str, Any]
    output_sample_rate: int = 24000
    decode_upsample_rate: int = 1920
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CodecConfig:
        if raw.get("model_type") != "qwen3_tts_tokenizer_12hz":
            raise ValueError(
                f"speech_tokenizer/config.json has model_type {raw.get('model_type')!r}, "
                "expected 'qwen3_tts_tokenizer_12hz'"
            )
        dec_raw = dict(raw["decoder_config"])
        for key in ("upsample_rates", "upsampling_ratios"):
            if key in dec_raw:
                dec_raw[key] = tuple(dec_raw[key])
        decoder = _pick(CodecDecoderConfig, dec_raw)
        if decoder.samples_per_frame != raw.get("decode_upsample_rate", 1920):
            raise ValueError("codec upsample rates do not multiply to decode_upsample_rate")
        return _pick(cls, raw, decoder=decoder, encoder_raw=raw.get("encoder_config", {}), raw=raw)

    @classmethod
    def from_file(cls, path: str | Path) -> CodecConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class SamplingDefaults:
    """`generation_config.json`: talker and code-predictor ("subtalker") sampling defaults."""

    do_sample: bool = True
    top_k: int = 50
    top_p: float = 1.0
    temperature: float = 0.9
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    subtalker_temperature: float = 0.9
    max_new_tokens: int = 8192

    @classmethod
    def from_file(cls, path: str | Path) -> SamplingDefaults:
        p = Path(path)
        return _pick(cls, json.loads(p.read_text())) if p.exists() else cls()


CONFIG_DIR = Path(__file__).parent / "configs"
