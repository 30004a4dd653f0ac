"""The interruption rule in the whole pipeline (user aggregator with our start strategy -> scripted LLM
-> Piper voice -> paced output): while the bot speaks, a user utterance shorter than
`min_interruption_s` does not interrupt it; a longer one does, as soon as it has lasted that long;
when the bot is silent any utterance is a turn. VAD frames are sent by the test (as Silero would
send them: the start `start_secs` after speech began, the stop `stop_secs` after it ended)."""

from __future__ import annotations

import time

import pytest
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    ErrorFrame,
    InterruptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregator
from pipecat.processors.filters.identity_filter import IdentityFilter
from pipecat.tests.utils import SleepFrame, run_test

from agent.interruptions import MinSpeechInterruptionStrategy
from agent.pipeline import AgentConfig, build_pipeline
from agent.piper_voice import make_piper_tts
from agent.scripted_llm import ScriptedLLM
from agent.server import UiEvents

from .helpers import PacedOutputTransport, PushTimes, run

REPLY = "Once upon a time there was a small robot. It liked to sing songs to the moon every night."


def utterance(text: str, seconds: float) -> list:
    """`seconds` of speech as the VAD reports it (start 0.2 s after the speech began, stop 0.2 s after
    it ended), then its transcript (as a segmented STT sends it: after the end)."""
    return [VADUserStartedSpeakingFrame(start_secs=0.2), SleepFrame(sleep=seconds),
            VADUserStoppedSpeakingFrame(stop_secs=0.2),
            TranscriptionFrame(text, user_id="user", timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"), finalized=True)]


class Conversation:
    """Runs the pipeline on `frames`: the messages of the context, when each frame was pushed, and
    the start strategy (to count the utterances it ignored)."""

    def __init__(self, frames: list, *, min_interruption_s: float = 0.5, **settings):
        cfg = AgentConfig(cadence_url=None, **{"user_speech_timeout_s": 0.2, **settings},
                          min_interruption_s=min_interruption_s).validate()
        llm = ScriptedLLM(replies=[REPLY, "Okay."], tokens_per_s=40, first_token_s=0.05)
        self.input = IdentityFilter()
        pipeline, context = build_pipeline(cfg, input=self.input, output=PacedOutputTransport(), stt=None,
                                           llm=llm, tts=make_piper_tts(), vad=False)
        aggregator = next(p for p in pipeline.processors if isinstance(p, LLMUserAggregator))
        self.page: list[dict] = []  # the events the page would get
        ui = UiEvents(self.page.append, stt=None, llm=llm, output=None, text_only=False, user_aggregator=aggregator)
        self.times = PushTimes()
        _, up = run(run_test(pipeline, frames_to_send=frames, observers=[self.times, ui]))
        assert not [f for f in up if isinstance(f, ErrorFrame)], up
        self.users, self.bots = ([m["content"] for m in context.get_messages() if m.get("role") == role]
                                 for role in ("user", "assistant"))
        self.strategy = aggregator._params.user_turn_strategies.start[0]  # (pipecat keeps them in its params)

    def vad_start(self, n: int) -> float:
        """When the test sent its n-th (0-based) VAD start."""
        return self.times.times(self.input, VADUserStartedSpeakingFrame)[n]

    def first_after(self, frame_type, t0: float) -> float | None:
        later = [t for t, _, f in self.times.pushed if isinstance(f, frame_type) and t > t0]
        return min(later) if later else None


def story_then(over_the_bot: list, after_s: float = 6.0) -> list:
    """A turn that starts the bot's long reply, then `over_the_bot` while it speaks."""
    return [*utterance("Tell me a story.", 1.0), SleepFrame(sleep=2.5), *over_the_bot, SleepFrame(sleep=after_s)]


def test_a_short_utterance_over_the_bot_does_not_interrupt_it():
    c = Conversation(story_then(utterance("Uh.", 0.3)))
    over = c.vad_start(1)
    assert c.first_after(BotStartedSpeakingFrame, 0) < over  # the bot was speaking
    assert c.first_after(InterruptionFrame, over) is None
    assert c.users == ["Tell me a story."]  # the short utterance's transcript was dropped
    assert [e["text"] for e in c.page if e["type"] == "user"] == c.users  # and the page never shows it
    assert [b.split() for b in c.bots] == [REPLY.split()]  # the whole reply was played
    assert c.strategy.ignored_utterances == 1


def test_without_the_rule_the_same_utterance_interrupts():
    """The control: with min_interruption_s = 0 the input above cuts the reply short."""
    c = Conversation(story_then(utterance("Uh.", 0.3)), min_interruption_s=0)
    over = c.vad_start(1)
    assert c.first_after(InterruptionFrame, over) - over < 0.1  # at the VAD start
    assert c.users == ["Tell me a story.", "Uh."]
    assert [e["text"] for e in c.page if e["type"] == "user"] == c.users
    assert 0 < len(c.bots[0].split()) < len(REPLY.split())
    assert c.strategy.ignored_utterances == 0


def test_a_long_utterance_over_the_bot_interrupts_once_it_has_lasted_the_minimum():
    c = Conversation(story_then(utterance("Stop, tell me another one.", 1.2)))
    over = c.vad_start(1)
    # The VAD start comes 0.2 s into the speech; 0.5 s of speech is certain once no stop (0.2 s
    # late) has come by 0.5 + 0.2 s after the speech began: 0.5 s after the VAD start.
    waited = c.first_after(InterruptionFrame, over) - over
    assert 0.45 < waited < 0.8, waited
    assert c.users == ["Tell me a story.", "Stop, tell me another one."]
    assert 0 < len(c.bots[0].split()) < len(REPLY.split())
    assert c.bots[-1] == "Okay."


def test_a_short_utterance_to_a_silent_bot_is_a_turn():
    c = Conversation([*utterance("Hi.", 0.3), SleepFrame(sleep=6.0)])
    assert c.users == ["Hi."] and [b.split() for b in c.bots] == [REPLY.split()]
    assert c.strategy.ignored_utterances == 0


def test_the_rule_is_configured_by_min_interruption_s():
    from agent.pipeline import user_params

    strategies = user_params(AgentConfig(min_interruption_s=0.8, vad_stop_s=0.3), vad=False).user_turn_strategies
    (start,) = strategies.start
    assert isinstance(start, MinSpeechInterruptionStrategy)
    assert (start.min_speech_s, start.vad_stop_s) == (0.8, 0.3)
    with pytest.raises(ValueError, match="min_interruption_s"):
        AgentConfig(min_interruption_s=-1).validate()


def test_the_reply_is_made_at_the_turns_end_but_plays_after_the_hold():
    """The defaults: the turn ends at the VAD's stop, the voice waits until 0.6 s of silence in all."""
    c = Conversation([*utterance("Hi.", 0.3), SleepFrame(sleep=6.0)], user_speech_timeout_s=0.0)
    stop = c.times.times(c.input, VADUserStoppedSpeakingFrame)[0]  # the user has been quiet 0.2 s by then
    assert c.first_after(BotStartedSpeakingFrame, stop) - stop >= 0.4 - 0.02
    assert c.users == ["Hi."] and [b.split() for b in c.bots] == [REPLY.split()]


def paused_sentence() -> list:
    """A sentence with 1.0 s of silence in the middle (the VAD's 0.2 s stop delay, then 0.8 s)."""
    return [*utterance("I would like to book a table,", 1.0), SleepFrame(sleep=0.8),
            *utterance("for two people.", 1.0), SleepFrame(sleep=6.0)]


def test_a_pause_inside_the_sentence_drops_the_held_reply_unheard():
    """The turn ends in the pause and a reply is made, but the user goes on before the hold is over:
    nothing of that reply is heard, and the next reply answers both parts."""
    c = Conversation(paused_sentence(), user_speech_timeout_s=0.0, reply_hold_s=1.2)
    assert c.first_after(BotStartedSpeakingFrame, 0) > c.vad_start(1)  # not a sound before the user went on
    assert c.first_after(InterruptionFrame, c.vad_start(1)) - c.vad_start(1) < 0.1
    assert c.users == ["I would like to book a table,", "for two people."]
    assert c.bots == ["Okay."]  # the first reply was made (the scripted LLM moved on) but never heard


def test_without_the_hold_the_same_pause_lets_the_bot_cut_in():
    """The control: with reply_hold_s = 0 the bot starts speaking in the same pause."""
    c = Conversation(paused_sentence(), user_speech_timeout_s=0.0, reply_hold_s=0.0)
    assert c.first_after(BotStartedSpeakingFrame, 0) < c.vad_start(1)  # heard in the pause
