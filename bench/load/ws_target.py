"""Target (b): Cadence's multi-context WebSocket `/v1/stream` (docs/streaming-api.md).

Two modes:
- `whole`: one `open` message carrying the whole text with `end: true`; time zero = that send.
- `words`: the text as an LLM would stream it, one word (with its trailing space) per message
  every `word_interval_s`, then `end`; time zero = sending the FIRST word (carried by `open`, so
  context set-up is inside the measurement), so first audio is measured from the first word.

Connections are pooled: each carries up to `contexts_per_connection` concurrent contexts, like an
agent server multiplexing turns, and a reader task per connection stamps every message with its
arrival time before routing it by `context_id`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import time
from collections.abc import Callable
from typing import Any

import websockets

from .corpus import Prompt
from .records import Exchange

_WORDS = re.compile(r"\S+\s*")


def split_words(text: str) -> list[str]:
    """Words with their trailing whitespace, so concatenating them gives the text back
    (leading whitespace, if any, rides on the first word)."""
    words = _WORDS.findall(text)
    if words and not text.startswith(words[0]):
        words[0] = text[: len(text) - len("".join(words))] + words[0]
    return words


class _Connection:
    def __init__(self, ws: Any):
        self.ws = ws
        self.handlers: dict[str, Callable[[dict, float], None]] = {}
        self.closed: str | None = None
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                now = time.perf_counter()
                msg = json.loads(raw)
                handler = self.handlers.get(msg.get("context_id"))
                if handler is not None:
                    handler(msg, now)
        except websockets.ConnectionClosed:
            pass
        finally:
            code = self.ws.close_code
            self.closed = f"connection closed ({code})"
            now = time.perf_counter()
            for handler in list(self.handlers.values()):
                handler({"type": "closed", "code": code}, now)

    async def send(self, msg: dict) -> None:
        await self.ws.send(json.dumps(msg))


class WsTarget:
    name = "ws"

    def __init__(self, ws_url: str, *, mode: str, word_interval_s: float, voice: str | None,
                 language: str | None, extra: dict[str, Any], sample_rate: int, contexts_per_connection: int):
        if mode not in ("whole", "words"):
            raise ValueError(f"WebSocket mode must be 'whole' or 'words', got {mode!r}")
        self.url = ws_url
        self.mode = mode
        self.word_interval_s = word_interval_s
        self.fields = {k: v for k, v in (("voice", voice), ("language", language)) if v is not None}
        self.extra = extra
        self.sample_rate = sample_rate
        self.per_connection = contexts_per_connection
        self.connections: list[_Connection] = []
        self.lock = asyncio.Lock()
        self.ids = itertools.count()

    def new_exchange(self, keep_pcm: bool) -> Exchange:
        return Exchange(self.sample_rate, keep_pcm)

    async def _acquire(self, context_id: str, handler: Callable[[dict, float], None]) -> _Connection:
        async with self.lock:
            conn = next((c for c in self.connections if c.closed is None and len(c.handlers) < self.per_connection),
                        None)
            if conn is None:
                # No ping timeout: a client busy under load must not be the one that drops the link.
                conn = _Connection(await websockets.connect(self.url, max_size=None, ping_interval=None))
                self.connections.append(conn)
                self.connections = [c for c in self.connections if c.closed is None]
            conn.handlers[context_id] = handler
            return conn

    async def run(self, prompt: Prompt, ex: Exchange) -> None:
        cid = f"b{next(self.ids)}"
        finished = asyncio.Event()

        def on_message(msg: dict, now: float) -> None:
            kind = msg.get("type")
            if ex.ttfb_s is None and kind != "closed":
                ex.ttfb_s = ex.since_t0(now)
            if kind == "audio":
                ex.add_pcm(base64.b64decode(msg["audio"]), now)
            elif kind == "done":
                if msg.get("reason") not in ("eos", "length"):
                    ex.error = ex.error or f"done: {msg.get('reason')}"
                ex.end_s = ex.since_t0(now)
                finished.set()
            elif kind == "error":
                # A refused `open` gets no `done`, so an error ends the request here (the cancel
                # sent below frees the context if it did open).
                ex.error = f"{msg.get('code')}: {msg.get('message')}"
                finished.set()
            elif kind == "closed":
                ex.error = ex.error or f"connection closed ({msg.get('code')})"
                finished.set()

        try:
            conn = await self._acquire(cid, on_message)
        except (OSError, websockets.InvalidHandshake, TimeoutError) as e:
            ex.t0 = time.perf_counter()
            ex.error = f"connect failed: {type(e).__name__}: {e}"
            return
        try:
            words = split_words(prompt.text) if self.mode == "words" else [prompt.text]
            opening = {"type": "open", "context_id": cid, **self.fields, **self.extra, "text": words[0],
                       "end": len(words) == 1}
            ex.t0 = time.perf_counter()
            await conn.send(opening)
            ex.status = 101
            if len(words) > 1:
                await self._stream_words(conn, cid, words[1:], ex.t0, finished)
            await finished.wait()
            if ex.error is not None and conn.closed is None:
                await conn.send({"type": "cancel", "context_id": cid})
        except asyncio.CancelledError:  # the driver's timeout: free the server's context too
            if conn.closed is None:
                with contextlib.suppress(websockets.ConnectionClosed):
                    await asyncio.shield(conn.send({"type": "cancel", "context_id": cid}))
            raise
        except websockets.ConnectionClosed as e:
            ex.error = ex.error or f"connection closed ({e})"
        finally:
            conn.handlers.pop(cid, None)

    async def _stream_words(self, conn: _Connection, cid: str, words: list[str], t0: float,
                            finished: asyncio.Event) -> None:
        # On a fixed grid from t0 (word k at t0 + k * interval), so send jitter does not accumulate.
        for k, word in enumerate(words, 1):
            delay = t0 + k * self.word_interval_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if finished.is_set():
                return
            await conn.send({"type": "append", "context_id": cid, "text": word})
        await conn.send({"type": "end", "context_id": cid})

    async def close(self) -> None:
        for conn in self.connections:
            await conn.ws.close()
            await conn.reader
