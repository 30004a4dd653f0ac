"""A tiny Base checkpoint and real speech (espeak-ng) as reference audio."""

from __future__ import annotations

import io
import subprocess

import numpy as np
import pytest
import soundfile

REFERENCE_TEXT = "The birch canoe slid on the smooth planks."


def espeak_wav_bytes(text: str, voice: str = "en-us") -> bytes:
    return subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], check=True, capture_output=True,
                          timeout=30).stdout


def at_24k(data: bytes) -> np.ndarray:
    from tts_engine.voices.audio import resample

    wav, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    return resample(wav, rate)


@pytest.fixture(scope="session")
def tiny_base_checkpoint(tmp_path_factory):
    from tts_engine.checkpoint import make_checkpoint

    return make_checkpoint("tiny", tmp_path_factory.mktemp("tiny-base"), seed=4, variant="base")


@pytest.fixture(scope="session")
def reference_wav_bytes() -> bytes:
    return espeak_wav_bytes(REFERENCE_TEXT)


@pytest.fixture(scope="session")
def reference_24k(reference_wav_bytes) -> np.ndarray:
    return at_24k(reference_wav_bytes)
