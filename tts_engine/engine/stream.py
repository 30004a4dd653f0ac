"""The stream handle a server holds: thread-safe commands in, asyncio events out."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Protocol

from .api import AudioEvent, DoneEvent, ErrorEvent, StreamEvent


class CommandSink(Protocol):
    """What a stream handle needs of its engine (core.StreamingEngine): its text checked, its commands queued."""

    def check_text(self, chars: int) -> None: ...

    def command(self, kind: str, stream_id: str, payload=None) -> None: ...


class Stream:
    """Implements `api.TTSStream`. Commands are queued to the engine thread; events come back
    through an asyncio queue owned by the event loop that opened the stream."""

    def __init__(self, engine: CommandSink, stream_id: str, loop: asyncio.AbstractEventLoop):
        self.id = stream_id
        self._engine = engine
        self.loop = loop
        self._events: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self._ended = False
        self.text_chars = 0  # all text given so far, checked against the engine's limit
        self.cancelled = False
        self.opened_at = time.monotonic()

    # -- commands (any thread) ------------------------------------------------------------------
    def append(self, text: str) -> None:
        if not isinstance(text, str):
            raise ValueError("text must be a string")
        if self._ended:
            raise ValueError("input has already ended for this stream")
        self._engine.check_text(self.text_chars + len(text))
        self.text_chars += len(text)
        self._engine.command("append", self.id, text)

    def flush(self) -> None:
        self._engine.command("flush", self.id)

    def end_input(self) -> None:
        if not self._ended:
            self._ended = True
            self._engine.command("end", self.id)

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._engine.command("cancel", self.id)

    def report_playout(self, played_s: float, at_monotonic: float) -> None:
        if not (played_s >= 0.0):
            raise ValueError("played_s must be a number >= 0")
        self._engine.command("playout", self.id, (float(played_s), float(at_monotonic)))

    # -- events ------------------------------------------------------------------------------------
    def deliver(self, event: StreamEvent) -> None:
        """Called from the engine thread (which batches most events through its `Outbox`)."""
        # A closed loop means nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.receive, event)

    def receive(self, event: StreamEvent) -> None:
        """On the stream's event loop."""
        self._events.put_nowait(event)

    async def events(self) -> AsyncIterator[StreamEvent]:
        while True:
            event = await self._events.get()
            if self.cancelled and isinstance(event, AudioEvent):
                continue
            yield event
            if isinstance(event, DoneEvent | ErrorEvent):
                return
