"""PCM helpers for streaming: float -> s16le, and the leading-silence onset detector."""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 24000
WINDOW = 480  # 20 ms
HOP = 240  # 10 ms
GUARD = 240  # keep 10 ms before the detected onset so no attack is cut


def to_s16(pcm: np.ndarray) -> np.ndarray:
    """float PCM (any shape) -> little-endian int16 samples, elementwise: converting a batch of
    streams at once gives each row exactly what converting it alone gives."""
    return (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2")


def to_s16le(pcm: np.ndarray) -> bytes:
    return to_s16(pcm).tobytes()


def find_onset(pcm: np.ndarray, threshold_dbfs: float) -> int | None:
    """Where sound starts, minus a 10 ms guard; None if there is no sound yet.

    Sound is the first of two consecutive 20 ms windows (10 ms hop, DC removed) whose RMS reaches
    `threshold_dbfs`. A window is that loud once a few samples of a loud sound enter it, so the
    sound starts at its first sample that deviates from the window's median (the silence level
    while sound fills less than half of it) by the threshold level."""
    if len(pcm) < WINDOW + HOP:
        return None
    n = (len(pcm) - WINDOW) // HOP + 1
    idx = np.arange(WINDOW)[None, :] + HOP * np.arange(n)[:, None]
    frames = pcm[idx].astype(np.float64)
    frames = frames - frames.mean(axis=1, keepdims=True)
    rms = np.sqrt((frames**2).mean(axis=1))
    loud = 20 * np.log10(np.maximum(rms, 1e-12)) >= threshold_dbfs
    hits = np.flatnonzero(loud[:-1] & loud[1:])
    if len(hits) == 0:
        return None
    start = int(hits[0]) * HOP
    window = pcm[start:start + WINDOW].astype(np.float64)
    level = 10 ** (threshold_dbfs / 20)
    # Some sample deviates by >= level: the RMS about the median is >= the RMS about the mean.
    first = int(np.argmax(np.abs(window - np.median(window)) >= level))
    return max(0, start + first - GUARD)


class OnsetTrimmer:
    """Holds back leading silence of one stream until speech starts; afterwards passes through.

    Audio before the onset is dropped (it would only delay what the listener hears); at most one
    window + hop of held audio is carried between chunks, so a quiet onset spanning a chunk
    boundary is still found."""

    def __init__(self, threshold_dbfs: float | None):
        self.threshold = threshold_dbfs
        self.started = threshold_dbfs is None
        self.held = np.zeros(0, dtype=np.float32)
        self.trimmed_samples = 0

    def push(self, pcm: np.ndarray) -> np.ndarray:
        if self.started:
            return pcm
        buf = np.concatenate((self.held, pcm))
        onset = find_onset(buf, self.threshold)
        if onset is None:
            keep = min(len(buf), WINDOW + HOP)
            self.trimmed_samples += len(buf) - keep
            self.held = buf[len(buf) - keep:]
            return np.zeros(0, dtype=np.float32)
        self.started = True
        self.trimmed_samples += onset
        self.held = np.zeros(0, dtype=np.float32)
        return buf[onset:]
