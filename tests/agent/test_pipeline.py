"""The agent pipeline from the user's turn to the assistant's context, against a real server:
a transcript in, the scripted LLM's reply spoken by Cadence, played by a paced output, and only
the words played kept in the conversation context."""

from __future__ import annotations

import time

import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.filters.identity_filter import IdentityFilter
from pipecat.tests.utils import SleepFrame, run_test

from agent.cadence_tts import CadenceStreamOptions, CadenceTTSService
from agent.pipeline import AgentConfig, build_pipeline
from agent.scripted_llm import ScriptedLLM

from .helpers import PacedOutputTransport, run

LONG_REPLY = ("Here is a long answer that keeps going for a while, so that there is plenty of speech "
              "left to cut when the user starts talking over it in the middle.")


def user_says(text: str, seconds: float = 0.3) -> list:
    """`seconds` of speech as Silero VAD reports it: a start 0.2 s after the speech began
    (`start_secs`), the transcript, a stop 0.2 s after it ended (`stop_secs`)."""
    return [VADUserStartedSpeakingFrame(start_secs=0.2), SleepFrame(sleep=seconds),
            TranscriptionFrame(text, user_id="user", timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"), finalized=True),
            VADUserStoppedSpeakingFrame(stop_secs=0.2)]


def agent(server, replies: list[str]):
    cfg = AgentConfig(cadence_url=server.ws_url, user_speech_timeout_s=0.2).validate()
    tts = CadenceTTSService(url=server.ws_url, options=CadenceStreamOptions(seed=5))
    llm = ScriptedLLM(replies=replies, tokens_per_s=40, first_token_s=0.05)
    output = PacedOutputTransport()
    pipeline, context = build_pipeline(cfg, input=IdentityFilter(), output=output, stt=None, llm=llm, tts=tts,
                                       vad=False)
    return pipeline, context, output


def messages(context, role: str) -> list[str]:
    return [m["content"] for m in context.get_messages() if m.get("role") == role]


def test_a_turn_ends_with_the_spoken_reply_in_the_context(cadence_server):
    reply = "Sure, it is sunny today."
    pipeline, context, output = agent(cadence_server, [reply])
    _, up = run(run_test(pipeline, frames_to_send=[*user_says("What is the weather like?"), SleepFrame(sleep=4.0)]))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    assert messages(context, "user") == ["What is the weather like?"]
    assert [m.split() for m in messages(context, "assistant")] == [reply.split()]
    assert output.written_s > 0.5
    cadence_server.wait_empty()


def test_talking_over_the_reply_cancels_it_and_the_context_keeps_only_what_was_played(cadence_server):
    pipeline, context, _ = agent(cadence_server, [LONG_REPLY, "Okay."])
    frames = [*user_says("Tell me a story."), SleepFrame(sleep=2.5), *user_says("Stop.", 1.0), SleepFrame(sleep=2.0)]
    down, up = run(run_test(pipeline, frames_to_send=frames))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    assert messages(context, "user") == ["Tell me a story.", "Stop."]
    first, second = [m.split() for m in messages(context, "assistant")]
    assert 0 < len(first) < len(LONG_REPLY.split()) and first == LONG_REPLY.split()[:len(first)]
    assert second == ["Okay."]
    assert any(isinstance(f, TTSAudioRawFrame) for f in down)
    cadence_server.wait_empty()


def test_config_picks_the_offline_defaults_and_refuses_bad_values():
    from pipecat.audio.vad.silero import SileroVADAnalyzer

    from agent.openai_tts import OpenAICompatibleTTSService
    from agent.pipeline import make_llm, make_tts, user_params

    cfg = AgentConfig().validate()
    assert isinstance(make_llm(cfg), ScriptedLLM)
    paced = make_llm(AgentConfig(scripted_first_token_s=0.2, scripted_tokens_per_s=60).validate())
    assert (paced._first_token_s, paced._tokens_per_s) == (0.2, 60)  # the GPU voice bench's stand-in pace
    assert isinstance(make_tts(cfg), CadenceTTSService)
    http = AgentConfig(cadence_url=None, speech_base_url="http://127.0.0.1:9/v1").validate()
    assert isinstance(make_tts(http), OpenAICompatibleTTSService)
    assert isinstance(user_params(cfg).vad_analyzer, SileroVADAnalyzer)  # the bundled model loads
    for bad in ({"cadence_url": None, "fallback_tts": "none"}, {"vad_stop_s": 0}, {"user_speech_timeout_s": -1},
                {"output_delay_s": -0.1}, {"scripted_first_token_s": -1}, {"scripted_tokens_per_s": 0}):
        with pytest.raises(ValueError):
            AgentConfig(**bad).validate()
