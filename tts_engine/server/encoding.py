"""Byte formats of `POST /v1/audio/speech`: raw PCM, WAV (streamed or whole) and SSE framing."""

from __future__ import annotations

import base64
import json
import struct

from ..engine.api import SAMPLE_RATE

CHANNELS = 1
SAMPLE_BYTES = 2  # s16le
STREAMING_SIZE = 0xFFFFFFFF  # RIFF and data sizes of a WAV whose length is not known yet


def wav_header(data_bytes: int | None) -> bytes:
    """44-byte PCM WAV header; `data_bytes=None` writes 0xFFFFFFFF sizes (a streamed WAV)."""
    if data_bytes is None:
        riff_size = data_size = STREAMING_SIZE
    else:
        data_size = data_bytes
        riff_size = min(36 + data_bytes, STREAMING_SIZE)
    byte_rate = SAMPLE_RATE * CHANNELS * SAMPLE_BYTES
    return (b"RIFF" + struct.pack("<I", riff_size) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, CHANNELS, SAMPLE_RATE, byte_rate,
                                    CHANNELS * SAMPLE_BYTES, 8 * SAMPLE_BYTES)
            + b"data" + struct.pack("<I", data_size))


def sse(event: dict) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


MEDIA_TYPES = {"pcm": "audio/pcm", "wav": "audio/wav"}
