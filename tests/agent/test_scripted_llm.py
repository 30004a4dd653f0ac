"""The offline scripted LLM streams like an LLM service: start, one text frame per token, end."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import (
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame, run_test

from agent.scripted_llm import ScriptedLLM, echo_reply, last_user_text, split_tokens

from .helpers import PushTimes, run


def context_frame(text: str) -> LLMContextFrame:
    return LLMContextFrame(context=LLMContext(messages=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": text}]))


@pytest.mark.parametrize("text", ["You said: Hello.", "snake_case 12345 naïve  end  ", "Ünïcödé wörds, 東京 ok!", ""])
def test_tokens_concatenate_to_the_text(text):
    assert "".join(split_tokens(text)) == text


def test_last_user_text_reads_strings_and_text_parts():
    messages = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "reply"},
                {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "image_url"}]}]
    assert last_user_text(messages) == "second"
    assert last_user_text([{"role": "system", "content": "x"}]) == ""


def test_reply_streams_token_by_token_at_the_configured_rate():
    llm = ScriptedLLM(tokens_per_s=50, first_token_s=0.1)
    times = PushTimes()
    down, _ = run(run_test(llm, frames_to_send=[context_frame("What time is it?")], observers=[times]))

    assert isinstance(down[0], LLMFullResponseStartFrame) and isinstance(down[-1], LLMFullResponseEndFrame)
    texts = [f.text for f in down[1:-1]]
    assert all(isinstance(f, LLMTextFrame) for f in down[1:-1])
    assert "".join(texts) == echo_reply("What time is it?")
    pushed = times.times(llm, LLMTextFrame)
    assert pushed[-1] - pushed[0] >= (len(pushed) - 1) / 50 * 0.9


def test_replies_cycle_and_an_interruption_cuts_the_reply_short():
    llm = ScriptedLLM(replies=["One two three four five six seven eight nine ten.", "Short."],
                      tokens_per_s=20, first_token_s=0.0)
    frames = [context_frame("a"), SleepFrame(sleep=0.2), InterruptionFrame(), SleepFrame(sleep=0.1),
              context_frame("b")]
    down, _ = run(run_test(llm, frames_to_send=frames))

    cut = next(i for i, f in enumerate(down) if isinstance(f, InterruptionFrame))
    first = "".join(f.text for f in down[:cut] if isinstance(f, LLMTextFrame))
    assert first and "One two three four five six seven eight nine ten.".startswith(first)
    assert len(first) < len("One two three four five six seven eight nine ten.")
    assert "".join(f.text for f in down[cut:] if isinstance(f, LLMTextFrame)) == "Short."
    starts = sum(isinstance(f, LLMFullResponseStartFrame) for f in down)
    ends = sum(isinstance(f, LLMFullResponseEndFrame) for f in down)
    assert starts == 2 and ends >= 1 and isinstance(down[-1], LLMFullResponseEndFrame)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        ScriptedLLM(tokens_per_s=0)
    with pytest.raises(ValueError):
        ScriptedLLM(replies=[])
