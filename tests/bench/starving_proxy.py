"""A deliberately starved TTS for the agent benchmark's tests: a real WebSocket proxy in front of
`cadence serve` that forwards the engine's audio to the agent at `speed` times real time (0.5: half
as fast as it plays), so the caller must hear gaps; `speed=None` passes it on as it comes. It counts
the agent's messages by type (`playout`: the playout reports). Everything passes through unchanged."""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import threading
import time

import websockets

SAMPLE_RATE = 24000  # the engine's 24 kHz s16le


async def _pump_audio(source, sink, speed: float | None) -> None:
    if speed is None:
        return await _pump(source, sink)
    started: dict[str, tuple[float, float]] = {}  # context -> (first audio at, audio seconds so far)
    async for raw in source:
        message = json.loads(raw) if isinstance(raw, str) else None
        if message is not None and message.get("type") == "audio":
            ctx = message.get("context_id")
            t0, audio_s = started.get(ctx, (time.monotonic(), 0.0))
            await asyncio.sleep(max(0.0, t0 + audio_s / speed - time.monotonic()))
            started[ctx] = (t0, audio_s + len(base64.b64decode(message["audio"])) / 2 / SAMPLE_RATE)
        await sink.send(raw)


async def _pump(source, sink, counts: collections.Counter | None = None) -> None:
    async for raw in source:
        if counts is not None and isinstance(raw, str):
            with contextlib.suppress(ValueError, AttributeError):
                counts[json.loads(raw).get("type")] += 1
        await sink.send(raw)


@contextlib.contextmanager
def starving_proxy(upstream_ws: str, speed: float | None = 0.5):
    """Yields (ws://127.0.0.1:PORT/v1/stream, the agent's messages counted by type), forwarding to
    `upstream_ws` (the engine's /v1/stream URL)."""
    loop = asyncio.new_event_loop()
    ready, holder, counts = threading.Event(), {}, collections.Counter()

    async def handle(agent_side):
        async with websockets.connect(upstream_ws, max_size=None) as engine_side:
            tasks = [asyncio.create_task(_pump(agent_side, engine_side, counts)),
                     asyncio.create_task(_pump_audio(engine_side, agent_side, speed))]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                task.cancel()

    async def main():
        async with websockets.serve(handle, "127.0.0.1", 0, max_size=None) as server:
            holder["port"] = server.sockets[0].getsockname()[1]
            holder["stop"] = asyncio.Event()
            ready.set()
            await holder["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"ws://127.0.0.1:{holder['port']}/v1/stream", counts
    finally:
        loop.call_soon_threadsafe(holder["stop"].set)
        thread.join(10)
        loop.close()
