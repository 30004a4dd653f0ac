"""A phone call through the carrier endpoint, end to end over a real socket: the carrier's exact
Media Streams messages (connected, start, media, mark, stop; Twilio's, Telnyx's and Exotel's; Plivo's
start, media, playedStream), on the stream URL the carrier's call webhook answered with, a question
spoken by espeak-ng sent as 8 kHz mu-law, the bot's audio back, transcribed by Whisper tiny.en to
the scripted LLM's answer. Offline defaults: Whisper tiny.en STT, the OFFLINE SCRIPTED LLM, the
Piper fallback voice. The carrier network is the one stand-in (tests/transports/telephony/carrier.py).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from websockets.asyncio.client import connect

from agent.pipeline import AgentConfig
from transports.telephony.endpoint import create_app

from .carrier import CarrierLeg
from .helpers import (
    QUESTION,
    AppThread,
    answers_the_question,
    open_sockets,
    spoken,
    transcribe,
    webhook_stream_url,
    words,
)

OFFLINE = AgentConfig(cadence_url=None)
BARGE_IN = "Wait, stop. Tell me about Paris instead, please."


def run(coro, timeout: float = 150):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def phone():
    with AppThread(create_app(OFFLINE)) as server:
        yield server


async def _conversation(server: AppThread, carrier: str, question: bytes, barge_in: bytes) -> dict:
    url = await asyncio.to_thread(webhook_stream_url, server.url, carrier)  # the call webhook's stream, one-time
    async with connect(url, proxy=None) as ws:
        leg = CarrierLeg(carrier, ws)
        await leg.start()
        call = await leg.wait_for(lambda: server.server.config.app.state.calls.get(leg.stream_id), 30, "call")
        await asyncio.sleep(1.0)  # the caller says nothing for a second, as people do
        spoke_end = await leg.say(question)
        first = await leg.wait_for(lambda: leg.first_audio_after(spoke_end), 60, "bot audio")
        # 5 s of the answer's audio (on a loaded machine the voice can come slower than real time)
        await leg.wait_for(lambda: leg.acked and len(leg.heard.pcm(since=first)) >= 5 * 2 * 8000, 60, "5 s of answer")
        answer = leg.heard.pcm(since=first)
        heard_s_at_barge = call.serializer.ledger.heard_s
        barge_start = time.monotonic()
        await leg.say(barge_in)
        clear_at = await leg.wait_for(lambda: next((t for t in leg.clears if t > barge_start), None), 20, "clear")
        await asyncio.sleep(0.5)
        after_clear = [arrived for arrived, _, _ in leg.heard.chunks if arrived > clear_at]
        await leg.hang_up()
    return {"latency_s": first - spoke_end, "answer": answer, "clear_at": clear_at, "barge_start": barge_start,
            "after_clear": after_clear, "acked": len(leg.acked), "heard_s": heard_s_at_barge,
            "rejected": call.serializer.rejected}


@pytest.mark.slow
@pytest.mark.parametrize("carrier", ["twilio", "telnyx", "plivo", "exotel"])
def test_a_caller_hears_the_answer_to_a_spoken_question_and_can_barge_in(phone, carrier, tmp_path):
    sockets_before = open_sockets()
    result = run(_conversation(phone, carrier, spoken(QUESTION, tmp_path), spoken(BARGE_IN, tmp_path)))

    said = words(transcribe(result["answer"]))
    print(f"\n{carrier}: end of caller speech -> first bot audio at the caller: {result['latency_s'] * 1000:.0f} ms; "
          f"heard: {' '.join(said)}")
    assert answers_the_question(said), " ".join(said)  # "You said: What is the capital ..."
    assert 0 < result["latency_s"] < 20  # a loose bound: a shared CI machine can be very slow
    # The carrier acknowledged marks and they moved the heard position (about what had played).
    assert result["acked"] > 10 and result["heard_s"] > 3.0, result
    # Barge-in: `clear` came, and at most one chunk already on its way followed it before the
    # next reply (which needs the new utterance transcribed first).
    assert result["clear_at"] > result["barge_start"]
    assert len([t for t in result["after_clear"] if t < result["clear_at"] + 0.3]) <= 1, result["after_clear"]
    assert result["rejected"] == 0
    deadline = time.monotonic() + 10
    while phone.server.config.app.state.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not phone.server.config.app.state.calls
    assert open_sockets() <= sockets_before
