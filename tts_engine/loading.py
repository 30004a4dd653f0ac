"""Loading a checkpoint directory: config, sampling defaults, tokenizer, talker and codec (and the
speaker encoder of a Base model).

Shared by the offline Synthesizer and the StreamingEngine, so both read a checkpoint the same way.
Loading reports progress by bytes read: a tqdm bar when stderr is a terminal, otherwise an INFO
log line per part, so a server's log shows where a slow start spends its time; its end is a start-up
phase line as the later phases' (runtime/progress.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import CodecConfig, ModelConfig, SamplingDefaults
from .model.codec import CodecDecoder
from .model.qwen3_tts import Qwen3TTS
from .runtime.progress import PREFIX, shows_bar
from .runtime.progress import log as startup_log
from .text import TextTokenizer
from .voices.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig
from .weights import CheckpointError, load_into, safetensors_files

log = logging.getLogger(__name__)


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
    speaker_encoder: SpeakerEncoder | None = None  # Base models only


class LoadProgress:
    """Bytes read so far, shown as a tqdm bar on a terminal or as one log line per finished part."""

    def __init__(self, total_bytes: int, *, bar: bool | None = None):
        self.total = total_bytes
        self.done = 0
        self._part_start = 0
        self.started = time.monotonic()
        self._bar = None
        if shows_bar(bar):
            from tqdm import tqdm

            self._bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="loading model")

    def add(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def part_done(self, name: str) -> None:
        if self._bar is None:
            log.info("loaded %s: %.1f MB read in %.1f s", name, (self.done - self._part_start) / 1e6,
                     time.monotonic() - self.started)
        self._part_start = self.done

    def close(self, finished: bool = True) -> None:
        if self._bar is not None:
            # The files also hold headers and tensors the engine never runs (the codec encoder):
            # once every part is loaded, the bar ends full.
            self._bar.update(max(0, self.total - self.done))
            self._bar.close()
        if finished:
            startup_log.info("%sloading model done in %.1f s", PREFIX, time.monotonic() - self.started)


def load_checkpoint(model_dir: str | Path, *, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None, progress_bar: bool | None = None) -> Checkpoint:
    """Talker in `dtype` (None: as stored); the codec and the speaker encoder stay fp32: the codec's
    SnakeBeta and long conv chains are precision-sensitive, and a voice is encoded once."""
    path, cfg = load_model_dir(model_dir)
    device = torch.device(device)
    codec_dir = path / "speech_tokenizer"
    if not (codec_dir / "config.json").exists():
        raise CheckpointError(f"{codec_dir}/config.json is missing")
    files, codec_files = safetensors_files(path), safetensors_files(codec_dir)
    progress = LoadProgress(sum(f.stat().st_size for f in [*files, *codec_files]), bar=progress_bar)
    finished = False
    try:
        with torch.device("meta"):
            model = Qwen3TTS(cfg)
        model = load_into(model, files, ignore_prefixes=("speaker_encoder.",), dtype=dtype, device=device,
                          on_bytes=progress.add).eval()
        progress.part_done("talker")
        speaker_encoder = None
        if cfg.tts_model_type == "base":
            with torch.device("meta"):
                speaker_encoder = SpeakerEncoder(SpeakerEncoderConfig.from_model_config(cfg.raw))
            speaker_encoder = load_into(speaker_encoder, files, prefix="speaker_encoder.",
                                        ignore_prefixes=("talker.",), dtype=torch.float32, device=device,
                                        on_bytes=progress.add).eval()
            progress.part_done("speaker encoder")
        codec_cfg = CodecConfig.from_file(codec_dir / "config.json")
        with torch.device("meta"):
            codec = CodecDecoder(codec_cfg.decoder)
        codec = load_into(codec, codec_files, prefix="decoder.", ignore_prefixes=("encoder.",),
                          device=device, on_bytes=progress.add).eval()
        progress.part_done("codec decoder")
        finished = True
    finally:
        progress.close(finished)
    return Checkpoint(path, cfg, codec_cfg, SamplingDefaults.from_file(path / "generation_config.json"),
                      TextTokenizer.from_dir(path), model, codec, speaker_encoder)
