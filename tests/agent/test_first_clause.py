"""The Piper fallback voice starts on the first clause: the aggregator's cuts, and the real voice's
first audio arriving while the LLM is still writing the first sentence."""

from __future__ import annotations

import asyncio
import time

from pipecat.frames.frames import (
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.tests.utils import SleepFrame, run_test

from agent.piper_voice import ClauseTextAggregator, make_piper_tts

from .helpers import PushTimes, run, tokens


def pieces(*replies: str) -> list[list[str]]:
    """Each reply fed token by token, then flushed (the LLM's turn ends): the pieces per reply."""

    async def go():
        aggregator, out = ClauseTextAggregator(), []
        for reply in replies:
            got = [p.text for t in tokens(reply) async for p in aggregator.aggregate(t)]
            rest = await aggregator.flush()
            out.append(got + ([rest.text] if rest and rest.text else []))
        return out

    return asyncio.run(go())


def test_clauses_end_at_commas_colons_and_dashes_and_sentences_at_their_end():
    assert pieces("You said: what is the capital of France? I am a reply, not a model.") == [
        ["You said:", "what is the capital of France?", "I am a reply,", "not a model."]]
    assert pieces("Well \u2014 maybe; it depends.") == [["Well \u2014", "maybe;", "it depends."]]


def test_a_long_first_clause_is_cut_after_five_words_and_only_the_first():
    (first,) = pieces("The quick brown fox jumps over the lazy dog and sleeps. Then it wakes up and runs far away.")
    assert first == ["The quick brown fox jumps", "over the lazy dog and sleeps.",
                     "Then it wakes up and runs far away."]
    # Each turn starts afresh: the next reply's first piece is cut after five words again.
    assert pieces("One two three four five six.", "Seven eight nine ten eleven twelve.") == [
        ["One two three four five", "six."], ["Seven eight nine ten eleven", "twelve."]]


def test_abbreviations_do_not_end_a_sentence():
    assert pieces("Dr. Lee is in.") == [["Dr. Lee is in."]]


def test_the_voice_starts_before_the_llm_finishes_the_first_sentence():
    """Tokens at 5 a second (a slow LLM): the first audio comes before the sentence's last token
    is sent, and the words spoken are the reply's."""
    reply = "Sure, the train to the airport leaves from platform four."
    piper = make_piper_tts()
    frames = [LLMFullResponseStartFrame()]
    for t in tokens(reply):
        frames += [LLMTextFrame(t), SleepFrame(sleep=0.2)]
    frames.append(LLMFullResponseEndFrame())
    observer = PushTimes()
    began = time.monotonic()
    down, up = run(run_test(piper, frames_to_send=frames, observers=[observer]))
    assert not [f for f in up if isinstance(f, ErrorFrame)], up
    first_audio = observer.times(piper, TTSAudioRawFrame)[0] - began
    last_token_sent = 0.2 * (len(tokens(reply)) - 1)
    assert first_audio < last_token_sent - 0.5, (first_audio, last_token_sent)
    spoken = [f.text for f in down if isinstance(f, TTSTextFrame)]
    assert spoken[0] == "Sure," and " ".join(spoken).split() == reply.split()
