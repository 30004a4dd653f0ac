"""An offline stand-in for the LLM: scripted replies, streamed token by token. Not a language model.

It answers each LLMContextFrame the way a streaming LLM service does (LLMFullResponseStartFrame,
one LLMTextFrame per token at a steady rate, LLMFullResponseEndFrame), so the rest of the
pipeline (token-streamed TTS, interruptions, latency observers) behaves as it would with a real
LLM, with no API key and no network. Its logs say what it is. An interruption cancels the reply
mid-stream, as it cancels a real LLM's completion.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

DEFAULT_REPLY = ("This is the offline scripted reply, not a language model. It streams token by token, "
                 "so you can hear the voice start before the text is finished. Connect an "
                 "OpenAI-compatible LLM to have a real conversation.")

# Roughly BPE-sized pieces: up to five letters with their leading space (a longer word goes on in
# further pieces), up to three digits, any other character on its own.
_TOKEN = re.compile(r"\s*[^\W\d_]{1,5}|\s*\d{1,3}|\s*\S|\s+")


def split_tokens(text: str) -> list[str]:
    """Cut `text` into LLM-like tokens whose concatenation is `text`."""
    return _TOKEN.findall(text)


def echo_reply(user_text: str) -> str:
    """The default script: repeat what was heard, then say what this is."""
    return f"You said: {user_text.strip()} {DEFAULT_REPLY}" if user_text.strip() else DEFAULT_REPLY


class ScriptedLLM(FrameProcessor):
    """Answers every LLMContextFrame with a scripted reply, streamed at `tokens_per_s`."""

    def __init__(
        self,
        *,
        replies: Sequence[str] | Callable[[str], str] = echo_reply,
        tokens_per_s: float = 25.0,
        first_token_s: float = 0.3,
        **kwargs,
    ):
        """Args:
        replies: a function of the user's last message, or replies used in turn (cycling).
        tokens_per_s: streaming rate after the first token (hosted LLMs: roughly 20 to 100).
        first_token_s: delay from the request to the first token (time to first token).
        """
        if tokens_per_s <= 0:
            raise ValueError(f"tokens_per_s must be > 0, got {tokens_per_s}")
        if first_token_s < 0:
            raise ValueError(f"first_token_s must be >= 0, got {first_token_s}")
        if not callable(replies) and not replies:
            raise ValueError("replies must be a function or a non-empty list of strings")
        super().__init__(**kwargs)
        self._replies = replies
        self._tokens_per_s = tokens_per_s
        self._first_token_s = first_token_s
        self._turns = 0

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame) and direction == FrameDirection.DOWNSTREAM:
            if frame.speculation:
                logger.debug(f"{self}: scripted LLM does not answer speculative contexts")
                return
            await self._reply(last_user_text(frame.context.get_messages()))
        else:
            await self.push_frame(frame, direction)

    def script(self, user_text: str) -> str:
        if callable(self._replies):
            return self._replies(user_text)
        return self._replies[self._turns % len(self._replies)]

    async def _reply(self, user_text: str) -> None:
        reply = self.script(user_text)
        self._turns += 1
        tokens = split_tokens(reply)
        logger.info(f"{self}: OFFLINE SCRIPTED LLM (no model) streams a {len(tokens)}-token reply at "
                    f"{self._tokens_per_s:g} tokens/s: {reply!r}")
        await self.push_frame(LLMFullResponseStartFrame())
        try:
            await self.start_ttfb_metrics()
            await asyncio.sleep(self._first_token_s)
            for i, token in enumerate(tokens):
                if i == 0:
                    await self.stop_ttfb_metrics()
                else:
                    await asyncio.sleep(1.0 / self._tokens_per_s)
                await self.push_frame(LLMTextFrame(token))
        finally:
            # As a real LLM service does, also when an interruption cancels the reply.
            await self.push_frame(LLMFullResponseEndFrame())


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
