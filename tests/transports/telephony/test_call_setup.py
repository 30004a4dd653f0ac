"""A new call's set-up keeps the process's event loop free for the calls already in progress: the
models it loads (Whisper's handle, the voice, Silero's VAD) load in threads. Silero's ONNX model
takes 30-50 ms of CPU a call; on the loop, every other call's audio in the process would wait."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect

from agent.pipeline import AgentConfig
from tests.agent.helpers import vads_made_on_the_loop
from transports.telephony.endpoint import create_app

from .carrier import CarrierLeg
from .helpers import AppThread, webhook_stream_url


def test_a_new_calls_voice_activity_detector_loads_off_the_event_loop(monkeypatch):
    on_loop = vads_made_on_the_loop(monkeypatch)

    async def call(server: AppThread) -> None:
        url = await asyncio.to_thread(webhook_stream_url, server.url, "twilio")
        async with connect(url, proxy=None) as ws:
            leg = CarrierLeg("twilio", ws)
            await leg.start()
            await leg.wait_for(lambda: on_loop, 60, "the call's voice activity detector")

    with AppThread(create_app(AgentConfig(cadence_url=None))) as server:
        asyncio.run(asyncio.wait_for(call(server), 90))
    assert on_loop == [False]
