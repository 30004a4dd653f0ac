"""CadenceTTSService under pipecat's test harness, against a real server on the tiny checkpoint."""

from __future__ import annotations

import json
import time

import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame, run_test
from websockets.sync.client import connect as ws_connect

from agent.cadence_tts import CadenceStreamOptions, CadenceTTSService
from agent.playout import PlayoutReporter
from agent.scripted_llm import ScriptedLLM
from tests.server.conftest import ServerThread, real_engine
from tts_engine.server import ServerConfig

from .helpers import PacedOutputTransport, PushTimes, run, tokens

TTS_FRAMES = (TTSStartedFrame, TTSAudioRawFrame, TTSTextFrame, TTSStoppedFrame)
SHORT = "Hello there, this is Cadence speaking."
LONG = ("This answer is long on purpose, so that the engine is still speaking it when the user "
        "decides to interrupt and ask something else instead of listening to the end of it.")


def service(server, **kwargs) -> CadenceTTSService:
    return CadenceTTSService(url=server.ws_url, options=CadenceStreamOptions(seed=3), **kwargs)


def engine_stat(server, key: str) -> int:
    return int(server.engine.metrics()[key])


def tts_frames(frames, context_id=None):
    return [f for f in frames if isinstance(f, TTS_FRAMES) and context_id in (None, f.context_id)]


def assert_one_utterance(frames, context_id) -> None:
    """Started, then audio (with words among it), then Stopped, all of one context."""
    seq = tts_frames(frames, context_id)
    assert isinstance(seq[0], TTSStartedFrame) and isinstance(seq[-1], TTSStoppedFrame), seq
    audio = [f for f in seq if isinstance(f, TTSAudioRawFrame)]
    assert audio and all(f.sample_rate == 24000 and f.num_channels == 1 and len(f.audio) % 2 == 0 for f in audio)
    assert sum(isinstance(f, TTSStartedFrame | TTSStoppedFrame) for f in seq) == 2


def test_llm_turn_gives_started_audio_words_stopped_from_one_engine_context(cadence_server):
    admitted = engine_stat(cadence_server, "admitted")
    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(SHORT)), LLMFullResponseEndFrame()]
    down, up = run(run_test(service(cadence_server), frames_to_send=frames))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    started = [f for f in down if isinstance(f, TTSStartedFrame)]
    assert len(started) == 1
    assert_one_utterance(down, started[0].context_id)
    assert isinstance(down[0], LLMFullResponseStartFrame) and isinstance(down[-1], LLMFullResponseEndFrame)
    # Words come from the engine's timestamps, in order, and they are the words of the text.
    words = [f.text for f in down if isinstance(f, TTSTextFrame)]
    assert " ".join(words).split() == SHORT.split()
    assert engine_stat(cadence_server, "admitted") == admitted + 1  # every token went to one context
    cadence_server.wait_empty()


def test_tokens_outside_a_response_share_one_engine_context_per_burst(cadence_server):
    """pipecat gives each token outside an LLM response a new context id; the service groups a
    burst of tokens into one utterance, ended by a pause or by the pipeline's end."""
    admitted = engine_stat(cadence_server, "admitted")
    frames = [*map(LLMTextFrame, tokens("First burst of words.")), SleepFrame(sleep=1.5),
              *map(LLMTextFrame, tokens("Second burst"))]  # no final punctuation: EndFrame ends it
    down, up = run(run_test(service(cadence_server, implicit_turn_idle_s=0.3), frames_to_send=frames))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    contexts = list(dict.fromkeys(f.context_id for f in tts_frames(down)))
    assert len(contexts) == 2
    for context_id in contexts:
        assert_one_utterance(down, context_id)
    words = [f.text for f in down if isinstance(f, TTSTextFrame)]
    assert " ".join(words).split() == ["First", "burst", "of", "words.", "Second", "burst"]
    assert engine_stat(cadence_server, "admitted") == admitted + 2
    cadence_server.wait_empty()


def test_speak_frame_is_an_utterance_of_its_own(cadence_server):
    down, up = run(run_test(service(cadence_server), frames_to_send=[TTSSpeakFrame("Just this.")]))
    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    (started,) = [f for f in down if isinstance(f, TTSStartedFrame)]
    assert_one_utterance(down, started.context_id)
    cadence_server.wait_empty()


def test_interruption_cancels_the_engine_context_and_no_old_audio_follows(cadence_server):
    cancelled = engine_stat(cadence_server, "cancelled")
    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(LONG)), LLMFullResponseEndFrame(),
              SleepFrame(sleep=1.0),  # the engine is speaking now (it needs several seconds for LONG)
              InterruptionFrame(), SleepFrame(sleep=1.0),
              LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(SHORT)), LLMFullResponseEndFrame()]
    down, up = run(run_test(service(cadence_server), frames_to_send=frames))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    assert engine_stat(cadence_server, "cancelled") == cancelled + 1
    cadence_server.wait_empty()
    cut = next(i for i, f in enumerate(down) if isinstance(f, InterruptionFrame))
    first, second = [f.context_id for f in down if isinstance(f, TTSStartedFrame)]
    assert [f for f in down[:cut] if isinstance(f, TTSAudioRawFrame) and f.context_id == first], \
        "the interruption came before any audio: the test proves nothing"
    assert not tts_frames(down[cut:], first), "audio, words or a stop of the interrupted context followed"
    spoken = " ".join(f.text for f in down[:cut] if isinstance(f, TTSTextFrame)).split()
    assert spoken == LONG.split()[:len(spoken)] and len(spoken) < len(LONG.split())
    assert_one_utterance(down[cut:], second)  # the service goes on with the next turn


def test_first_audio_arrives_while_the_llm_is_still_writing(cadence_server):
    """TOKEN aggregation: the engine speaks the first words before the last token exists."""
    llm = ScriptedLLM(replies=[LONG], tokens_per_s=10, first_token_s=0.0)
    tts = service(cadence_server)
    times = PushTimes()
    context = LLMContext(messages=[{"role": "user", "content": "Tell me something."}])
    down, up = run(run_test(Pipeline([llm, tts]), frames_to_send=[LLMContextFrame(context=context)],
                            observers=[times]))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    last_token = times.times(llm, LLMTextFrame)[-1]
    first_audio = times.times(tts, TTSAudioRawFrame)[0]
    assert len(times.times(llm, LLMTextFrame)) > 20
    assert first_audio < last_token - 1.0, (first_audio, last_token)
    (started,) = [f for f in down if isinstance(f, TTSStartedFrame)]
    assert_one_utterance(down, started.context_id)
    cadence_server.wait_empty()


class RecordingSink:
    """Forwards playout reports to the service and keeps a copy."""

    def __init__(self, tts: CadenceTTSService):
        self.tts = tts
        self.reports: list[tuple[str, float]] = []

    async def report_playout(self, context_id: str, played_s: float) -> None:
        self.reports.append((context_id, played_s))
        await self.tts.report_playout(context_id, played_s)


def test_playout_reports_follow_the_audio_the_transport_wrote(cadence_server):
    tts = service(cadence_server)
    output = PacedOutputTransport()
    sink = RecordingSink(tts)
    reporter = PlayoutReporter(sink, interval_s=0.2)
    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(SHORT)), LLMFullResponseEndFrame()]
    down, up = run(run_test(Pipeline([tts, output, reporter]), frames_to_send=frames))

    assert not [f for f in up if isinstance(f, ErrorFrame)], up  # the server took every report
    (started,) = [f for f in down if isinstance(f, TTSStartedFrame)]
    assert sink.reports and {c for c, _ in sink.reports} == {started.context_id}
    played = [p for _, p in sink.reports]
    assert played == sorted(played) and played[0] <= 0.05  # from the first 10 ms chunk on
    assert played[-1] == pytest.approx(output.written_s)  # the final report (at TTSStopped) counts it all
    assert len(played) >= output.written_s / 0.2 - 1  # about every interval_s while playing
    cadence_server.wait_empty()


def test_a_context_the_server_refuses_is_an_error_and_its_turn_still_ends(tiny_checkpoint):
    """Engine full (one stream, held by another client): the open is refused with `overloaded`;
    the turn ends (Started, Stopped, no audio) instead of waiting for a `done` that never comes."""
    engine = real_engine(tiny_checkpoint, max_active_streams=1, max_queued_streams=0)
    with ServerThread(engine, ServerConfig()) as server:
        server.wait_ready()
        with ws_connect(server.ws_url, proxy=None) as other:
            other.send(json.dumps({"type": "open", "context_id": "hold", "voice": "ryan"}))
            deadline = time.monotonic() + 10
            while server.active_streams() < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(SHORT)), LLMFullResponseEndFrame()]
            started = time.monotonic()
            down, up = run(run_test(service(server), frames_to_send=frames))

        assert time.monotonic() - started < 5  # no wait for a stop-frame timeout
        errors = [f.error for f in up if isinstance(f, ErrorFrame)]
        assert sum("Cadence server error" in e for e in errors) == 1 and "overloaded" in errors[0], errors
        seq = tts_frames(down)
        assert isinstance(seq[0], TTSStartedFrame) and isinstance(seq[-1], TTSStoppedFrame), seq
        assert not [f for f in seq if isinstance(f, TTSAudioRawFrame)]
        server.wait_empty(timeout=5)  # closing the other connection cancelled its stream


def test_an_unreachable_server_is_reported_and_the_turn_ends_at_once():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tts = CadenceTTSService(url=f"ws://127.0.0.1:{port}/v1/stream")
    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(SHORT)), LLMFullResponseEndFrame()]
    started = time.monotonic()
    down, up = run(run_test(tts, frames_to_send=frames))

    assert time.monotonic() - started < 3
    errors = [f.error for f in up if isinstance(f, ErrorFrame)]
    assert errors and all("Cadence server" in e or "no audio" in e for e in errors), errors
    assert len(errors) <= 3  # once at start, once for the turn, once for its silent audio context
    seq = tts_frames(down)
    assert isinstance(seq[0], TTSStartedFrame) and isinstance(seq[-1], TTSStoppedFrame), seq
    assert not [f for f in seq if isinstance(f, TTSAudioRawFrame)]


def test_a_promoted_sentences_words_go_out_before_words_queued_behind_it():
    """In TOKEN mode pipecat's sequencer hands back the words it held for a sentence once the sentence is complete;
    word frames already queued in the audio context must not overtake them (stops 14 and 35: the context read "to
    Here is a long answer ..."). Driven by hand, without a server: the handed-back frames wait beside the queue, go out
    before the queue's next item, the marker queued with them is never pushed, the end of the context flushes them, and
    an interruption drops them with the queue."""
    import asyncio

    from pipecat.services.tts_service import _AudioContextPlayback

    tts = CadenceTTSService(url="ws://127.0.0.1:9")
    pushed, queued = [], []

    async def push_frame(frame, *args, **kwargs):
        pushed.append(frame)

    async def append(context_id, frame):
        queued.append(frame)

    tts.push_frame, tts.append_to_audio_context = push_frame, append
    tts.audio_context_available = lambda context_id: True
    words = [TTSTextFrame(w, "word") for w in ("Here", "is", "to")]

    async def scenario():
        playback = _AudioContextPlayback()
        await tts._push_sequencer_frames(words[:2], "c")  # the sentence promoted, its held words handed back
        assert not pushed and len(queued) == 1, "they wait; a marker is queued"
        await tts._push_audio_context_item("c", words[2], playback)  # a word frame queued before the promotion
        await tts._push_audio_context_item("c", queued.pop(), playback)  # the marker: nothing left to push
        assert [f.text for f in pushed] == ["Here", "is", "to"]
        await tts._push_sequencer_frames(words[:1], "c")
        await tts.on_audio_context_interrupted("c")
        await tts._push_audio_context_item("c", words[2], playback)
        assert [f.text for f in pushed] == ["Here", "is", "to", "to"], "an interruption drops them"

    asyncio.run(scenario())


def test_audio_comes_at_the_pipelines_output_rate_whole(cadence_server):
    """A phone pipeline runs at 8 kHz: the service resamples (agent/resample.py) and loses nothing."""
    from pipecat.pipeline.worker import PipelineParams

    frames = [LLMFullResponseStartFrame(), *map(LLMTextFrame, tokens(SHORT)), LLMFullResponseEndFrame()]
    seconds = {}
    for rate in (24000, 8000):
        down, up = run(run_test(service(cadence_server), frames_to_send=frames,
                                pipeline_params=PipelineParams(audio_out_sample_rate=rate)))
        assert not [f for f in up if isinstance(f, ErrorFrame)], up
        audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
        assert audio and all(f.sample_rate == rate and f.audio for f in audio)
        seconds[rate] = sum(len(f.audio) / 2 / rate for f in audio)
    assert abs(seconds[8000] - seconds[24000]) < 0.002, seconds  # the seeded engine says the same both times
    cadence_server.wait_empty()
