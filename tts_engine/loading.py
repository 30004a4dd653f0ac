"""Loading a checkpoint directory: config, sampling defaults, tokenizer, talker and codec.

Shared by the offline Synthesizer and the StreamingEngine, so both read a checkpoint the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .config import CodecConfig, ModelConfig, SamplingDefaults
from .model.codec import CodecDecoder
from .model.qwen3_tts import Qwen3TTS
from .text import TextTokenizer
from .weights import CheckpointError, load_into, safetensors_files


def load_model_dir(model_dir: str | Path) -> tuple[Path, ModelConfig]:
    path = Path(model_dir)
    if not path.is_dir():
        raise CheckpointError(f"model directory {path} does not exist")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} is not a Qwen3-TTS checkpoint: config.json is missing")
    return path, ModelConfig.from_file(path / "config.json")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    cfg: ModelConfig
    codec_cfg: CodecConfig
    defaults: SamplingDefaults
    tokenizer: TextTokenizer
    model: Qwen3TTS
    codec: CodecDecoder


def load_checkpoint(model_dir: str | Path, *, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> Checkpoint:
    """Talker in `dtype` (None: as stored); the codec stays fp32 as shipped: its SnakeBeta and long
    conv chains are precision-sensitive."""
    path, cfg = load_model_dir(model_dir)
    device = torch.device(device)
    with torch.device("meta"):
        model = Qwen3TTS(cfg)
    model = load_into(model, safetensors_files(path), dtype=dtype, device=device).eval()
    codec_dir = path / "speech_tokenizer"
    if not (codec_dir / "config.json").exists():
        raise CheckpointError(f"{codec_dir}/config.json is missing")
    codec_cfg = CodecConfig.from_file(codec_dir / "config.json")
    with torch.device("meta"):
        codec = CodecDecoder(codec_cfg.decoder)
    codec = load_into(codec, safetensors_files(codec_dir), prefix="decoder.", ignore_prefixes=("encoder.",),
                      device=device).eval()
    return Checkpoint(path, cfg, codec_cfg, SamplingDefaults.from_file(path / "generation_config.json"),
                      TextTokenizer.from_dir(path), model, codec)
