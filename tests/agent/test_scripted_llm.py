"""The offline scripted LLM streams like an LLM service: start, one text frame per token, end."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import (
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMServiceMetadataFrame,
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
    # Like every pipecat LLM service, it announces itself first.
    assert isinstance(down[0], LLMServiceMetadataFrame)
    down = down[1:]

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


def test_a_script_sees_the_request_and_calls_tools_through_pipecats_function_calling():
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import FunctionCallInProgressFrame, FunctionCallResultFrame, FunctionCallsStartedFrame

    from agent.scripted_llm import Reply, ToolCall, Turn

    seen: list[Turn] = []
    calls: list[dict] = []

    def script(turn: Turn) -> Reply:
        seen.append(turn)
        city = turn.user_text.rsplit(" ", 1)[-1].rstrip("?")
        return Reply("Let me look.", (ToolCall("get_weather", {"city": city}),))

    async def get_weather(params):
        calls.append(dict(params.arguments))
        await params.result_callback({"sky": "clear"})

    llm = ScriptedLLM(script=script, tokens_per_s=100, first_token_s=0.0)
    llm.register_function("get_weather", get_weather)
    tools = ToolsSchema(standard_tools=[FunctionSchema(name="get_weather", description="The weather in a city.",
                                                       properties={"city": {"type": "string"}}, required=["city"])])
    context = LLMContext(messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=tools)
    down, _ = run(run_test(llm, frames_to_send=[LLMContextFrame(context=context)]))

    assert [(t.user_text, t.tools, t.last_role) for t in seen] == [("Weather in Oslo?", ("get_weather",), "user")]
    assert calls == [{"city": "Oslo"}]
    assert "".join(f.text for f in down if isinstance(f, LLMTextFrame)) == "Let me look."
    started = next(f for f in down if isinstance(f, FunctionCallInProgressFrame))
    result = next(f for f in down if isinstance(f, FunctionCallResultFrame))
    assert (started.function_name, dict(started.arguments)) == ("get_weather", {"city": "Oslo"})
    assert (result.tool_call_id, result.result) == (started.tool_call_id, {"sky": "clear"})
    # The calls start inside the response (before its end), as a real LLM service's do.
    end = next(i for i, f in enumerate(down) if isinstance(f, LLMFullResponseEndFrame))
    assert next(i for i, f in enumerate(down) if isinstance(f, FunctionCallsStartedFrame)) < end


def test_listed_replies_may_be_replies_with_tool_calls_and_a_bad_script_is_refused():
    from agent.scripted_llm import Reply, ToolCall, Turn

    llm = ScriptedLLM(replies=["Hi.", Reply(tool_calls=(ToolCall("end_call"),))])
    turn = Turn(messages=[], tools=(), system_instruction=None)
    assert llm.answer(turn) == Reply("Hi.")
    assert llm.calls_tools and not ScriptedLLM().calls_tools and not ScriptedLLM(replies=["Hi."]).calls_tools
    with pytest.raises(ValueError):
        ScriptedLLM(script="not a function")
    with pytest.raises(TypeError):
        ScriptedLLM(script=lambda turn: 42).answer(turn)
