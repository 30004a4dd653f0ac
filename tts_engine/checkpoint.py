"""Random-weight checkpoints in the exact official layout (`cadence make-checkpoint`).

Model weights cannot be downloaded here, so tests and benchmarks run on checkpoints with the
official file layout, tensor names, shapes and dtypes, filled with seeded random values:

  DIR/config.json                 official config (+ a `random_weights` block, see below)
  DIR/generation_config.json      official sampling defaults
  DIR/vocab.json merges.txt tokenizer_config.json   synthetic BPE, specials at the real ids
  DIR/preprocessor_config.json
  DIR/model.safetensors           talker + code predictor (bf16 for the real sizes)
  DIR/speech_tokenizer/{config.json, model.safetensors (fp32), preprocessor_config.json}

Scales keep bf16 activations finite and the decoded audio clearly audible. A random model never
emits EOS on purpose, so the `random_weights` block tells the engine to stop each request at the
frame count real speech of its text would take; a real checkpoint has no such block and always
stops on EOS.
"""

from __future__ import annotations

import json
import math
import shutil
import zlib
from pathlib import Path

import torch
from safetensors.torch import save_file

from .checkpoint_text import write_synthetic_tokenizer
from .config import CONFIG_DIR, CodecConfig, ModelConfig
from .model.codec_init import random_codec_state_dict
from .model.qwen3_tts import Qwen3TTS

SIZES = {
    "tiny": ("tiny-customvoice.config.json", "tiny-speech_tokenizer.config.json", torch.float32),
    "tiny-0.6b": ("tiny-customvoice.config.json", "tiny-speech_tokenizer.config.json", torch.float32),
    "0.6b": ("0.6b-customvoice.config.json", "speech_tokenizer.config.json", torch.bfloat16),
    "1.7b": ("1.7b-customvoice.config.json", "speech_tokenizer.config.json", torch.bfloat16),
}
# "tiny" has the 1.7B layout (talker wider than the code predictor: a projection between them);
# "tiny-0.6b" the 0.6B one: talker and code predictor of one width (no projection tensor),
# attention wider than the hidden state, text embedding wider than the talker, and the 0.6B size
# tag, under which the reference drops instructions.
TINY_06B_TALKER = {"hidden_size": 32, "intermediate_size": 96, "text_hidden_size": 64}


def model_config_raw(size: str) -> dict:
    """The config.json of a named size (CustomVoice)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of: {', '.join(SIZES)}")
    raw = json.loads((CONFIG_DIR / SIZES[size][0]).read_text())
    if size == "tiny-0.6b":
        raw["tts_model_size"] = "0b6"
        raw["talker_config"].update(TINY_06B_TALKER)
    return raw
DEFAULT_CHARS_PER_SECOND = 14.5
FRAME_RATE_HZ = 12.5

GENERATION_CONFIG = {
    "do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
    "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0,
    "subtalker_top_k": 50, "max_new_tokens": 8192,
}
FEATURE_EXTRACTOR = {
    "chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
    "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
    "sampling_rate": 24000,
}


def speech_frames(text: str, chars_per_second: float) -> int:
    """Frames real speech of `text` takes: the leading (silent) frame plus one per 80 ms."""
    return 1 + max(1, math.ceil(len(text.strip()) / chars_per_second * FRAME_RATE_HZ))


def _generator(seed: int, name: str, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)


def random_model(size: str, dtype: torch.dtype, device, seed: int = 0) -> tuple[ModelConfig, Qwen3TTS]:
    """Qwen3TTS of a named size with random weights built directly on `device` (no checkpoint on
    disk): for GPU tests and benchmarks that need only the model."""
    cfg = ModelConfig.from_dict(model_config_raw(size))
    with torch.device("meta"):
        model = Qwen3TTS(cfg)
    model.load_state_dict(random_talker_state_dict(cfg, seed, dtype, device), assign=True)
    return cfg, model.eval()


def random_talker_state_dict(cfg: ModelConfig, seed: int, dtype: torch.dtype,
                             device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Every talker/code-predictor tensor, seeded per name, in `dtype`.

    Linear weights ~ N(0, 1/fan_in) keep every projection's output at the scale of its input;
    embeddings ~ N(0, 1); RMSNorm weights ~ 1 + N(0, 0.1^2); biases ~ N(0, 0.02^2).
    """
    device = torch.device(device)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in Qwen3TTS(cfg).state_dict().items()}
    out = {}
    for name, shape in shapes.items():
        g = _generator(seed, name, device)
        t = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
        if name.endswith("norm.weight"):
            t = 1 + 0.1 * t
        elif name.endswith(".bias"):
            t = 0.02 * t
        elif "embedding" not in name:
            t = t / math.sqrt(shape[-1])
        out[name] = t.to(dtype)
    return out


def random_speaker_encoder_state_dict(raw_cfg: dict, seed: int, dtype: torch.dtype,
                                     device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """`speaker_encoder.*` tensors: conv weights ~ N(0, 2/fan_in) (ReLU network), biases ~
    N(0, 0.02^2), so the embedding stays at unit scale through the blocks."""
    from .voices.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in
                  SpeakerEncoder(SpeakerEncoderConfig.from_model_config(raw_cfg)).state_dict().items()}
    out = {}
    for name, shape in shapes.items():
        key = f"speaker_encoder.{name}"
        t = torch.randn(shape, generator=_generator(seed, key, torch.device(device)), device=device)
        out[key] = (0.02 * t if name.endswith(".bias") else t * math.sqrt(2 / math.prod(shape[1:]))).to(dtype)
    return out


VARIANTS = ("custom_voice", "voice_design", "base")
# The Base models' speaker encoder: the official layer widths for the real sizes, a narrow one for
# tiny test checkpoints. `enc_dim` is always the talker's width.
TINY_SPEAKER_ENCODER = {"enc_channels": [32, 32, 32, 32, 96], "enc_attention_channels": 16,
                        "enc_res2net_scale": 4, "enc_se_channels": 16}


def make_checkpoint(size: str, out: str | Path, *, seed: int = 0, dtype: torch.dtype | None = None,
                    device: str | torch.device = "cpu", variant: str = "custom_voice",
                    chars_per_second: float = DEFAULT_CHARS_PER_SECOND) -> Path:
    """Write a complete random-weight checkpoint. `variant`: CustomVoice (9 built-in voices),
    VoiceDesign (no voices, an instruction describes the voice; same tensors) or Base (no voices,
    voice cloning from reference audio; adds the `speaker_encoder.*` tensors)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of: {', '.join(VARIANTS)}")
    if not chars_per_second > 0:
        raise ValueError("chars_per_second must be > 0")
    raw = model_config_raw(size)
    _, codec_cfg_name, default_dtype = SIZES[size]
    dtype = dtype or default_dtype
    out = Path(out)
    (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)

    if variant != "custom_voice":
        raw["tts_model_type"] = variant
        raw["talker_config"]["spk_id"] = {}
        raw["talker_config"]["spk_is_dialect"] = {}
    if variant == "base":
        raw["speaker_encoder_config"] = {"enc_dim": raw["talker_config"]["hidden_size"], "sample_rate": 24000,
                                         **(TINY_SPEAKER_ENCODER if size.startswith("tiny") else {})}
    raw["random_weights"] = {
        "seed": seed, "chars_per_second": chars_per_second,
        "note": "random weights made by `cadence make-checkpoint`; generation stops at the length "
                "real speech of the text would take instead of on EOS",
    }
    raw["torch_dtype"] = str(dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(FEATURE_EXTRACTOR, indent=2))
    write_synthetic_tokenizer(out, seed=seed)

    cfg = ModelConfig.from_dict(raw)
    talker = random_talker_state_dict(cfg, seed, dtype, device)
    if variant == "base":
        talker |= random_speaker_encoder_state_dict(raw, seed, dtype, device)
    save_file({k: v.contiguous().cpu() for k, v in talker.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    del talker

    codec_dir = out / "speech_tokenizer"
    shutil.copyfile(CONFIG_DIR / codec_cfg_name, codec_dir / "config.json")
    (codec_dir / "preprocessor_config.json").write_text(json.dumps(FEATURE_EXTRACTOR, indent=2))
    codec = random_codec_state_dict(CodecConfig.from_file(codec_dir / "config.json"), seed)
    save_file({k: v.contiguous().cpu() for k, v in codec.items()}, str(codec_dir / "model.safetensors"),
              metadata={"format": "pt"})
    return out
