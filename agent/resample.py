"""The engine's 24 kHz audio at the output transport's rate, resampled as it arrives, one utterance at a time.

pipecat's output transport resamples with soxr's very-high-quality stream, which works in blocks: from
24 kHz to a phone line's 8 kHz it gives nothing for the first 80 ms chunk and releases it only with the
next one, so every reply's first words wait for the engine's second chunk. soxr's medium quality keeps
16-bit precision and a flat band to 0.9 of the output's Nyquist frequency, and holds back ~14 ms."""

from __future__ import annotations

import numpy as np
import soxr

QUALITY = "MQ"


class UtteranceResampler:
    """s16le mono bytes in at `in_rate`, out at `out_rate`; `flush` gives the filter's tail at the end."""

    def __init__(self, in_rate: int, out_rate: int):
        self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16", quality=QUALITY)

    def __call__(self, pcm: bytes) -> bytes:
        return self._stream.resample_chunk(np.frombuffer(pcm, dtype=np.int16)).tobytes()

    def flush(self) -> bytes:
        return self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True).tobytes()
