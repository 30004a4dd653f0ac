"""Audible onset of a PCM signal, as serving.md defines it.

20 ms windows every 10 ms; each window has its own mean removed (DC offset carries no sound); a
window is audible when its RMS is >= -45 dBFS (RMS relative to a full-scale amplitude of 1.0);
the onset is the first sample of the first of two consecutive audible windows. Leading silence
and a constant offset therefore do not count as audio; a lone click does (every sample but those
of the first hop lies in two overlapping windows), as a listener would hear it.
"""

from __future__ import annotations

import numpy as np

WINDOW_S = 0.020
HOP_S = 0.010
THRESHOLD_DBFS = -45.0


def pcm16_to_float(pcm: bytes | np.ndarray) -> np.ndarray:
    """s16le bytes (or an int16 array) -> float32 in [-1, 1)."""
    ints = np.frombuffer(pcm, dtype="<i2") if isinstance(pcm, bytes | bytearray | memoryview) else pcm
    return ints.astype(np.float32) / 32768.0


def window_dbfs(signal: np.ndarray, sample_rate: int) -> np.ndarray:
    """RMS level (dBFS) of each full 20 ms window at a 10 ms hop; shape (n_windows,).

    A trailing partial window is not scored: it would be judged on fewer samples than the rest.
    """
    win = round(WINDOW_S * sample_rate)
    hop = round(HOP_S * sample_rate)
    if len(signal) < win:
        return np.empty(0, dtype=np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(np.asarray(signal, dtype=np.float64), win)[::hop]
    centred = frames - frames.mean(axis=1, keepdims=True)
    rms = np.sqrt(np.mean(centred * centred, axis=1))
    with np.errstate(divide="ignore"):
        return 20.0 * np.log10(rms)  # -inf for digital silence


def audible_onset(signal: np.ndarray, sample_rate: int, threshold_dbfs: float = THRESHOLD_DBFS) -> int | None:
    """Index of the onset sample, or None when no two consecutive windows are audible."""
    loud = window_dbfs(signal, sample_rate) >= threshold_dbfs
    both = loud[:-1] & loud[1:]
    hits = np.flatnonzero(both)
    if hits.size == 0:
        return None
    return int(hits[0]) * round(HOP_S * sample_rate)


class OnsetTracker:
    """The same onset, found while the audio streams in: each new full window is scored once and
    samples before the next window to score are dropped, so a long response costs no memory and
    no end-of-request burst of work (which would stall the client's event loop under load)."""

    def __init__(self, sample_rate: int, threshold_dbfs: float = THRESHOLD_DBFS):
        self.sample_rate = sample_rate
        self.threshold = threshold_dbfs
        self.win = round(WINDOW_S * sample_rate)
        self.hop = round(HOP_S * sample_rate)
        self.onset: int | None = None
        self._buf = np.empty(0, dtype=np.float32)
        self._buf_start = 0  # sample index of _buf[0]
        self._next = 0  # index of the next window to score
        self._prev_loud = False  # whether window _next - 1 was audible

    def feed(self, samples: np.ndarray) -> None:
        if self.onset is not None or samples.size == 0:
            return
        self._buf = np.concatenate([self._buf, samples])
        first = self._next * self.hop - self._buf_start  # _next's start inside _buf
        levels = window_dbfs(self._buf[first:], self.sample_rate)
        if levels.size == 0:
            return
        loud = np.concatenate([[self._prev_loud], levels >= self.threshold])
        hits = np.flatnonzero(loud[:-1] & loud[1:])
        if hits.size:
            self.onset = (self._next + int(hits[0]) - 1) * self.hop
            self._buf = np.empty(0, dtype=np.float32)
            return
        self._next += levels.size
        self._prev_loud = bool(loud[-1])
        drop = self._next * self.hop - self._buf_start
        self._buf = self._buf[drop:]
        self._buf_start += drop
