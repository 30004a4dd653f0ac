"""Reference audio of a given length for the cloning benchmark (bench/startup.py): espeak-ng reading
Harvard sentences where espeak-ng is installed, else a synthetic voiced signal (harmonics of a gliding
pitch under a syllable-rate envelope, so the engine's silence and length checks see speech-like audio).
Encode time depends on the length, not on what is said."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import numpy as np
import soundfile

from bench.socket_latency import corpus

RATE = 24000


def source() -> str:
    return "espeak-ng" if shutil.which("espeak-ng") else "synthetic"


def _espeak(seconds: float) -> tuple[np.ndarray, int, str]:
    words, text = [], ""
    for sentence in corpus():
        words.append(sentence)
        text = " ".join(words)
        raw = subprocess.run(["espeak-ng", "-v", "en-us", "--stdout", text], check=True, capture_output=True,
                             timeout=60).stdout
        wav, rate = soundfile.read(io.BytesIO(raw), dtype="float32")
        if len(wav) >= seconds * rate:
            return wav[: round(seconds * rate)], rate, text
    raise RuntimeError(f"the corpus is shorter than {seconds} s of espeak-ng speech")


def _synthetic(seconds: float) -> tuple[np.ndarray, int, str]:
    t = np.arange(round(seconds * RATE)) / RATE
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)  # a gliding pitch, 110-170 Hz
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2  # syllables at ~4 Hz
    noise = np.random.default_rng(0).normal(0, 0.02, t.shape)
    wav = 0.25 * voiced * envelope / np.abs(voiced).max() + noise
    return wav.astype(np.float32), RATE, "A synthetic voice reads nothing in particular."


def reference_wav(seconds: float, workdir: Path) -> tuple[Path, str]:
    """A WAV of exactly `seconds` and its (approximate) transcript, made once per length in `workdir`."""
    kind = source()
    path = Path(workdir) / f"reference-{kind}-{seconds:g}s.wav"
    text_path = path.with_suffix(".txt")
    if not path.exists():
        wav, rate, text = _espeak(seconds) if kind == "espeak-ng" else _synthetic(seconds)
        soundfile.write(path, wav, rate, subtype="PCM_16")
        text_path.write_text(text)
    return path, text_path.read_text()
