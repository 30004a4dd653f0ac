"""An offline stand-in for the LLM: scripted replies, streamed token by token. Not a language model.

It is a pipecat LLM service, answering each LLMContextFrame the way a streaming LLM service does
(LLMFullResponseStartFrame, one LLMTextFrame per token at a steady rate, then any tool calls,
LLMFullResponseEndFrame), so the rest of the pipeline (token-streamed TTS, interruptions, latency
observers, function calling, pipecat.flows) behaves as it would with a real LLM, with no API key
and no network. Its logs say what it is. An interruption cancels the reply mid-stream, as it
cancels a real LLM's completion.

A script is either replies (a function of the user's last message, or a list used in turn) or a
`script` function of the whole request (`Turn`: messages, tools offered, system instruction), which
is what drives a flow deterministically: it may answer with a `Reply` that calls tools, run by
pipecat's own function-calling machinery exactly as a real LLM's tool calls are.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    FunctionCallFromLLM,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings

DEFAULT_REPLY = ("This is the offline scripted reply, not a language model. It streams token by token, "
                 "so you can hear the voice start before the text is finished. Connect an "
                 "OpenAI-compatible LLM to have a real conversation.")

# Roughly BPE-sized pieces: up to five letters with their leading space (a longer word goes on in
# further pieces), up to three digits, any other character on its own.
_TOKEN = re.compile(r"\s*[^\W\d_]{1,5}|\s*\d{1,3}|\s*\S|\s+")


@dataclass(frozen=True)
class ToolCall:
    """One function call the scripted LLM makes."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """A scripted answer: text streamed first, then the tool calls (either may be empty)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Turn:
    """What a script sees of one request."""

    messages: list
    tools: tuple[str, ...]
    system_instruction: str | None

    @property
    def user_text(self) -> str:
        return last_user_text(self.messages)

    @property
    def last_role(self) -> str | None:
        """The role of the newest message ("user", "tool", "developer", ...), None if there is none."""
        for message in reversed(self.messages):
            if isinstance(message, dict) and "role" in message:
                return message["role"]
        return None


Script = Callable[[Turn], "str | Reply"]


def split_tokens(text: str) -> list[str]:
    """Cut `text` into LLM-like tokens whose concatenation is `text`."""
    return _TOKEN.findall(text)


def echo_reply(user_text: str) -> str:
    """The default script: repeat what was heard, then say what this is."""
    return f"You said: {user_text.strip()} {DEFAULT_REPLY}" if user_text.strip() else DEFAULT_REPLY


class ScriptedLLM(LLMService):
    """Answers every LLMContextFrame with a scripted reply, streamed at `tokens_per_s`."""

    def __init__(
        self,
        *,
        replies: Sequence[str | Reply] | Callable[[str], str | Reply] = echo_reply,
        script: Script | None = None,
        tokens_per_s: float = 25.0,
        first_token_s: float = 0.3,
        **kwargs,
    ):
        """Args:
        replies: a function of the user's last message, or replies used in turn (cycling).
        script: a function of the whole request (`Turn`); when given, `replies` is not used.
        tokens_per_s: streaming rate after the first token (hosted LLMs: roughly 20 to 100).
        first_token_s: delay from the request to the first token (time to first token).
        """
        if tokens_per_s <= 0:
            raise ValueError(f"tokens_per_s must be > 0, got {tokens_per_s}")
        if first_token_s < 0:
            raise ValueError(f"first_token_s must be >= 0, got {first_token_s}")
        if script is None and not callable(replies) and not replies:
            raise ValueError("replies must be a function or a non-empty list of strings")
        if script is not None and not callable(script):
            raise ValueError("script must be a function of the request (a Turn)")
        # Every setting given, as pipecat asks of its services; none of them changes a script.
        kwargs.setdefault("settings", LLMSettings(
            model="scripted", system_instruction=None, temperature=None, max_tokens=None, top_p=None, top_k=None,
            frequency_penalty=None, presence_penalty=None, seed=None, filter_incomplete_user_turns=None,
            user_turn_completion_config=None))
        super().__init__(**kwargs)
        self._replies = replies
        self._script = script
        self._tokens_per_s = tokens_per_s
        self._first_token_s = first_token_s
        self._turns = 0
        self._call_ids = itertools.count(1)

    @property
    def calls_tools(self) -> bool:
        """False when its script surely calls no tools (the default echo, or listed replies without any)."""
        if self._script is not None or (callable(self._replies) and self._replies is not echo_reply):
            return True
        return not callable(self._replies) and any(isinstance(r, Reply) and r.tool_calls for r in self._replies)

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            if frame.speculation:
                logger.debug(f"{self}: scripted LLM does not answer speculative contexts")
                return
            await self._reply(frame.context)
        else:
            await self.push_frame(frame, direction)

    def answer(self, turn: Turn) -> Reply:
        """The scripted answer to one request."""
        if self._script is not None:
            answer = self._script(turn)
        elif callable(self._replies):
            answer = self._replies(turn.user_text)
        else:
            answer = self._replies[self._turns % len(self._replies)]
        if isinstance(answer, str):
            return Reply(text=answer)
        if not isinstance(answer, Reply):
            raise TypeError(f"a script must return a str or a Reply, got {type(answer).__name__}")
        return answer

    async def _reply(self, context: LLMContext) -> None:
        reply = self.answer(turn_of(context, self._settings.system_instruction))
        self._turns += 1
        tokens = split_tokens(reply.text)
        calls = ", ".join(f"{c.name}({dict(c.arguments)})" for c in reply.tool_calls) or "none"
        logger.info(f"{self}: OFFLINE SCRIPTED LLM (no model) streams a {len(tokens)}-token reply at "
                    f"{self._tokens_per_s:g} tokens/s: {reply.text!r}; tool calls: {calls}")
        await self.push_frame(LLMFullResponseStartFrame())
        try:
            await self.start_ttfb_metrics()
            await asyncio.sleep(self._first_token_s)
            await self.stop_ttfb_metrics()
            for i, token in enumerate(tokens):
                if i:
                    await asyncio.sleep(1.0 / self._tokens_per_s)
                await self.push_frame(LLMTextFrame(token))
            if reply.tool_calls:
                await self.run_function_calls([
                    FunctionCallFromLLM(function_name=c.name, tool_call_id=f"scripted-call-{next(self._call_ids)}",
                                        arguments=dict(c.arguments), context=context)
                    for c in reply.tool_calls])
        finally:
            # As a real LLM service does, also when an interruption cancels the reply.
            await self.push_frame(LLMFullResponseEndFrame())


def turn_of(context: LLMContext, system_instruction: Any = None) -> Turn:
    tools = context.tools
    names = tuple(t.name for t in getattr(tools, "standard_tools", None) or ())
    return Turn(messages=context.get_messages(), tools=names,
                system_instruction=system_instruction if isinstance(system_instruction, str) else None)


def last_user_text(messages: list) -> str:
    """The text of the last user message (text parts joined), or "" if there is none."""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""
