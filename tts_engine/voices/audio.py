"""Reference audio from a user: bytes in any format libsndfile reads (WAV, FLAC, OGG/Vorbis, ...)
-> mono float32 at 24 kHz, checked so that a clone is made only from usable speech.

Limits: at least MIN_SECONDS (the speaker embedding and the in-context prompt need a few words),
at most MAX_SECONDS (the in-context prompt grows with the reference: 12.5 rows per second), and not
silent (RMS above SILENCE_DBFS). Resampling is polyphase (scipy), exact for 24 kHz input.
"""

from __future__ import annotations

import io
import math
from fractions import Fraction

import numpy as np

SAMPLE_RATE = 24000
MIN_SECONDS = 1.0
MAX_SECONDS = 30.0
SILENCE_DBFS = -50.0


class ReferenceAudioError(ValueError):
    """Unusable reference audio. `kind`: "format" (cannot be read) or "content" (read, unusable)."""

    def __init__(self, message: str, kind: str = "content"):
        super().__init__(message)
        self.kind = kind


def decode_audio(data: bytes) -> tuple[np.ndarray, int]:
    """-> (mono float32 samples, sample rate). Raises ReferenceAudioError(kind="format")."""
    import soundfile

    if not data:
        raise ReferenceAudioError("the reference audio is empty", "format")
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError):
        raise ReferenceAudioError("the reference audio is not in a readable format: send WAV, FLAC or "
                                  "OGG", "format") from None
    return samples.mean(axis=1).astype(np.float32), int(rate)


def resample(wav: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    if rate == target:
        return wav.astype(np.float32, copy=False)
    from scipy.signal import resample_poly

    ratio = Fraction(target, rate)
    return resample_poly(wav, ratio.numerator, ratio.denominator).astype(np.float32)


def check_reference(wav: np.ndarray, rate: int = SAMPLE_RATE) -> None:
    """Raises ReferenceAudioError(kind="content") naming what is wrong."""
    seconds = len(wav) / rate
    if not np.isfinite(wav).all():
        raise ReferenceAudioError("the reference audio holds NaN or infinite samples")
    if seconds < MIN_SECONDS:
        raise ReferenceAudioError(f"the reference audio is too short ({seconds:.2f} s): give "
                                  f"{MIN_SECONDS:g} to {MAX_SECONDS:g} s of speech (3 to 10 s work best)")
    if seconds > MAX_SECONDS:
        raise ReferenceAudioError(f"the reference audio is too long ({seconds:.1f} s): give at most "
                                  f"{MAX_SECONDS:g} s (3 to 10 s work best)")
    rms = float(np.sqrt(np.mean(np.square(wav, dtype=np.float64))))
    level = 20 * math.log10(rms) if rms > 0 else -math.inf
    if level < SILENCE_DBFS:
        raise ReferenceAudioError(f"the reference audio is silent (RMS {level:.0f} dBFS)")


def load_reference(data: bytes) -> np.ndarray:
    """Bytes -> checked mono float32 at 24 kHz, peak-limited to [-1, 1]."""
    wav, rate = decode_audio(data)
    if rate < 8000:
        raise ReferenceAudioError(f"the reference audio's sample rate ({rate} Hz) is too low: use 16 kHz "
                                  "or more", "content")
    check_reference(wav, rate)
    return np.clip(resample(wav, rate), -1.0, 1.0)


def load_reference_file(path) -> np.ndarray:
    """A reference audio file (`cadence say --ref-audio`, the agent's config) -> checked 24 kHz mono.
    Raises FileNotFoundError or ReferenceAudioError (a ValueError) with a one-line message."""
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"reference audio {path} does not exist")
    try:
        return load_reference(path.read_bytes())
    except ReferenceAudioError as e:
        raise ReferenceAudioError(f"{path}: {e}", e.kind) from None
