"""A reference WAV as the agent's voice (AgentConfig.voice_ref_audio), against a real `cadence serve`
on a tiny Base checkpoint: uploaded once to POST /v1/voices, spoken with, and clear errors when the
file is missing, the engine refuses it or does not answer. The reference speech comes from espeak-ng."""

from __future__ import annotations

import socket

import httpx
import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
)
from pipecat.tests.utils import run_test

from agent.cadence_tts import CadenceStreamOptions, CadenceTTSService
from agent.cadence_voice import VoiceUploadError
from agent.pipeline import AgentConfig, make_tts
from bench.load.server_proc import ServerProcess
from tests.voices.conftest import REFERENCE_TEXT, espeak_wav_bytes

from .helpers import run, tokens

TEXT = "Hello there, this is a cloned voice."


@pytest.fixture(scope="module")
def base_server(tmp_path_factory):
    from tts_engine.checkpoint import make_checkpoint

    path = make_checkpoint("tiny", tmp_path_factory.mktemp("agent-base"), seed=4, variant="base")
    with ServerProcess(path, ready_timeout_s=300) as server:
        yield server


@pytest.fixture(scope="module")
def reference_wav(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "speaker.wav"
    path.write_bytes(espeak_wav_bytes(REFERENCE_TEXT))
    return path


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/stream"


def one_turn(tts: CadenceTTSService):
    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(TEXT)), LLMFullResponseEndFrame()]
    return run(run_test(tts, frames_to_send=frames))


def voices(server) -> list[dict]:
    return httpx.get(server.url + "/v1/voices", timeout=10).json()["data"]


def test_the_agent_speaks_in_the_voice_of_its_reference_wav(base_server, reference_wav):
    cfg = AgentConfig(cadence_url=ws_url(base_server), voice_ref_audio=str(reference_wav),
                      voice_ref_text=REFERENCE_TEXT, seed=3).validate()
    tts = make_tts(cfg)
    down, up = one_turn(tts)

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    assert sum(len(f.audio) for f in down if isinstance(f, TTSAudioRawFrame)) > 24000  # > 0.5 s of speech
    held = voices(base_server)
    assert [v["id"] for v in held] == [tts._settings.voice]
    assert held[0]["mode"] == "in_context" and held[0]["reference_text"] == REFERENCE_TEXT

    # Another session of the same agent process: the same voice, not a second upload.
    again = CadenceTTSService(url=ws_url(base_server), options=CadenceStreamOptions(seed=3),
                              voice_ref_audio=str(reference_wav), voice_ref_text=REFERENCE_TEXT)
    down, up = one_turn(again)
    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    assert again._settings.voice == tts._settings.voice
    assert len(voices(base_server)) == 1


def test_without_a_transcript_the_voice_streams_the_llms_tokens(base_server, reference_wav):
    """Speaker-embedding cloning: the turn is opened at its first token, as with a built-in voice."""
    tts = CadenceTTSService(url=ws_url(base_server), options=CadenceStreamOptions(seed=3),
                            voice_ref_audio=str(reference_wav))
    down, up = one_turn(tts)
    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    assert sum(len(f.audio) for f in down if isinstance(f, TTSAudioRawFrame)) > 24000
    mine = [v for v in voices(base_server) if v["id"] == tts._settings.voice]
    assert len(mine) == 1 and mine[0]["mode"] == "speaker_embedding"
    assert not tts._held


def test_a_missing_reference_file_is_a_clear_error_at_start(tmp_path):
    missing = tmp_path / "nobody.wav"
    with pytest.raises(ValueError, match=r"voice_ref_audio .*nobody\.wav does not exist"):
        AgentConfig(voice_ref_audio=str(missing)).validate()
    with pytest.raises(VoiceUploadError, match=r"nobody\.wav does not exist"):
        CadenceTTSService(url="ws://127.0.0.1:9/v1/stream", voice_ref_audio=str(missing))


def test_a_reference_the_engine_refuses_is_an_error_frame_with_its_reason(base_server, tmp_path):
    short = tmp_path / "short.wav"
    short.write_bytes(espeak_wav_bytes("Hi."))  # under the engine's minimum length
    tts = CadenceTTSService(url=ws_url(base_server), voice_ref_audio=str(short))
    down, up = one_turn(tts)

    errors = [f.error for f in up if isinstance(f, ErrorFrame)]
    assert any("refused" in e and "short.wav" in e and "(422)" in e for e in errors), errors
    assert not [f for f in down if isinstance(f, TTSAudioRawFrame)]


def test_an_unreachable_engine_is_an_error_frame_naming_it(reference_wav):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tts = CadenceTTSService(url=f"ws://127.0.0.1:{port}/v1/stream", voice_ref_audio=str(reference_wav))
    _, up = one_turn(tts)

    errors = [f.error for f in up if isinstance(f, ErrorFrame)]
    assert any("unreachable" in e and f"127.0.0.1:{port}/v1/voices" in e for e in errors), errors


def test_the_demo_config_takes_the_reference_from_its_file_or_environment(reference_wav, tmp_path):
    from agent.demo import load_config

    cfg = load_config(None, {"CADENCE_VOICE_REF_AUDIO": str(reference_wav), "CADENCE_VOICE_REF_TEXT": REFERENCE_TEXT})
    assert (cfg.voice_ref_audio, cfg.voice_ref_text) == (str(reference_wav), REFERENCE_TEXT)
    toml = tmp_path / "agent.toml"
    toml.write_text(f'voice_ref_audio = "{reference_wav}"\n')
    assert load_config(toml, {}).voice_ref_audio == str(reference_wav)
    toml.write_text(f'voice_ref_audio = "{tmp_path / "gone.wav"}"\n')
    with pytest.raises(ValueError, match=r"gone\.wav does not exist"):
        load_config(toml, {})
