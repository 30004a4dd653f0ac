"""OpenAICompatibleTTSService: client-side onset trimming, and speech from our HTTP endpoint."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.tests.utils import run_test

from agent.openai_tts import LeadingSilenceTrimmer, OpenAICompatibleTTSService
from tts_engine.engine.audio import GUARD, find_onset

from .helpers import run, tokens

RATE = 24000


def s16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).round().astype("<i2").tobytes()


def speech_after_silence(silence_s: float, seed: int = 0) -> tuple[bytes, int]:
    """Quiet noise (-70 dBFS) then a 220 Hz tone; returns the PCM and the tone's first sample."""
    rng = np.random.default_rng(seed)
    onset = int(silence_s * RATE)
    quiet = rng.normal(0, 10 ** (-70 / 20), onset)
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(RATE // 2) / RATE)
    return s16(np.concatenate([quiet, tone])), onset


def push_in_pieces(trimmer: LeadingSilenceTrimmer, pcm: bytes, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    out, i = bytearray(), 0
    while i < len(pcm):
        n = int(rng.integers(1, 3000))  # odd sizes too: samples split across pieces
        out += trimmer.push(pcm[i:i + n])
        i += n
    return bytes(out)


@pytest.mark.parametrize("seed", range(4))
def test_trimmer_cuts_leading_silence_at_the_onset_whatever_the_chunking(seed):
    pcm, onset = speech_after_silence(0.35, seed)
    trimmer = LeadingSilenceTrimmer(-45.0)
    out = push_in_pieces(trimmer, pcm, seed)
    cut = len(pcm) - len(out)
    assert out == pcm[cut:]  # only a prefix is removed, the rest passes byte for byte
    assert onset - GUARD - 240 <= cut // 2 <= onset  # cut within the guard before the tone
    assert trimmer.trimmed_samples == cut // 2


def test_trimmer_keeps_everything_when_off_and_nothing_of_pure_silence():
    pcm, _ = speech_after_silence(0.2)
    assert push_in_pieces(LeadingSilenceTrimmer(None), pcm, 1) == pcm
    silence = s16(np.zeros(RATE))
    assert push_in_pieces(LeadingSilenceTrimmer(-45.0), silence, 2) == b""


def speech_service(server, **kwargs) -> OpenAICompatibleTTSService:
    return OpenAICompatibleTTSService(base_url=server.url + "/v1", extra_body={"seed": 7, "language": "english"},
                                      **kwargs)


def test_sentences_are_spoken_from_our_http_endpoint_starting_with_sound(cadence_server):
    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens("Hello there. How are you today?")),
              LLMFullResponseEndFrame()]
    down, up = run(run_test(speech_service(cadence_server), frames_to_send=frames))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    seq = [f for f in down if isinstance(f, TTSStartedFrame | TTSAudioRawFrame | TTSStoppedFrame)]
    assert isinstance(seq[0], TTSStartedFrame) and isinstance(seq[-1], TTSStoppedFrame)
    audio = b"".join(f.audio for f in seq if isinstance(f, TTSAudioRawFrame))
    assert len(audio) > RATE  # two sentences of speech-length audio
    assert all(f.sample_rate == RATE for f in seq if isinstance(f, TTSAudioRawFrame))
    first = np.frombuffer(audio[: RATE // 5 * 2], dtype="<i2").astype(np.float32) / 32768
    assert find_onset(first, -45.0) <= GUARD  # sound starts at once: no leading silence left
    cadence_server.wait_empty()


def test_a_refused_request_is_an_error_frame_not_a_crash(cadence_server):
    tts = speech_service(cadence_server, settings=OpenAICompatibleTTSService.Settings(voice="nobody"))
    frames = [LLMFullResponseStartFrame(), LLMTextFrame("Hello there."), LLMFullResponseEndFrame()]
    down, up = run(run_test(tts, frames_to_send=frames))
    errors = [f for f in up if isinstance(f, ErrorFrame)]
    assert errors and "422" in errors[0].error
    assert not [f for f in down if isinstance(f, TTSAudioRawFrame)]
    cadence_server.wait_empty()
