"""The benchmark's questions (short, Harvard-sentence-like) and their espeak-ng recordings.

Recordings are kept in a cache ($XDG_CACHE_HOME or ~/.cache, then cadence/speech/): a machine without
espeak-ng (a GPU box) runs the benchmarks on recordings made elsewhere and copied there."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

QUESTIONS = [
    "What is the capital of France?",
    "How far away is the moon?",
    "Can you tell me a short story?",
    "What time does the store open?",
    "Which train goes to the airport?",
    "How do I make a cup of tea?",
    "Is it going to rain tomorrow?",
    "Where did I leave my keys?",
    "Who wrote the old letter?",
    "What is the best way to learn music?",
]
SPEECH_RMS = 0.01  # loud: above -40 dBFS over a 10 ms window (the page's own threshold)


def speech_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cadence" / "speech"


def recording(text: str) -> Path:
    """espeak-ng's WAV of `text`, from the cache or recorded into it."""
    path = speech_cache() / (hashlib.sha256(text.encode()).hexdigest()[:24] + ".wav")
    if path.exists():
        return path
    if shutil.which("espeak-ng") is None:
        raise FileNotFoundError(f"espeak-ng is not installed and {path} (a recording of {text!r}) is not cached: "
                                "run the benchmark once where espeak-ng is, then copy that cache directory here")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        part = Path(tmp) / path.name
        subprocess.run(["espeak-ng", "-w", str(part), text], check=True, timeout=30)
        part.replace(path)  # whole files only: concurrent callers may record the same text
    return path


def speak(text: str, rate: int = 48000) -> np.ndarray:
    """`text` read by espeak-ng, as int16 mono at `rate`."""
    import soxr

    with wave.open(str(recording(text))) as w:
        source_rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    audio = soxr.resample(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768, source_rate, rate)
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)


def speech_end_s(clip: np.ndarray, rate: int) -> float:
    """Seconds from the clip's start to the end of its last loud 10 ms window."""
    win = rate // 100
    n = len(clip) // win
    frames = clip[: n * win].astype(np.float32).reshape(n, win) / 32768
    loud = np.flatnonzero(np.sqrt((frames * frames).mean(axis=1)) > SPEECH_RMS)
    return float((loud[-1] + 1) * win / rate) if loud.size else 0.0


def questions(n: int) -> list[str]:
    if not 1 <= n <= 100:
        raise ValueError(f"turns must be in [1, 100], got {n}")
    return [QUESTIONS[i % len(QUESTIONS)] for i in range(n)]
