"""The phone leg's playout clock, against a real Cadence server (the engine on the tiny
random-weight checkpoint: its audio is noise, so nothing here is transcribed): the played
position the engine is told moves only when the carrier acknowledges marks, and a hang-up
mid-answer frees the call's engine context."""

from __future__ import annotations

import asyncio
import time

import pytest
from websockets.asyncio.client import connect

from agent.pipeline import AgentConfig
from tests.server.conftest import ServerThread, real_engine
from transports.telephony.endpoint import create_app
from tts_engine.server import ServerConfig

from .carrier import CarrierLeg
from .helpers import QUESTION, AppThread, spoken, webhook_stream_url


@pytest.fixture(scope="module")
def cadence_server(tiny_checkpoint):
    with ServerThread(real_engine(tiny_checkpoint), ServerConfig()) as server:
        server.wait_ready()
        yield server


async def _call(phone: AppThread, engine: ServerThread, question: bytes) -> dict:
    url = await asyncio.to_thread(webhook_stream_url, phone.url, "twilio")
    async with connect(url, proxy=None) as ws:
        leg = CarrierLeg("twilio", ws, ack_marks=False)  # the carrier holds its acknowledgements
        await leg.start()
        call = await leg.wait_for(lambda: phone.server.config.app.state.calls.get(leg.stream_id), 30, "call")
        await asyncio.sleep(1.0)
        spoke_end = await leg.say(question)
        first = await leg.wait_for(lambda: leg.first_audio_after(spoke_end), 60, "bot audio")
        await asyncio.sleep(1.0)
        reporter = call.reporters[0]
        before = {"reports": list(reporter.reports), "pending": call.serializer.ledger.pending,
                  "held": len(leg.pending_marks), "engine_streams": engine.active_streams()}
        leg.ack_marks = True
        await leg.wait_for(lambda: len(reporter.reports) >= 3, 20, "playout reports")
        await asyncio.sleep(0.5)
        after = list(reporter.reports)
        heard_by_carrier = sum(len(p) / 2 / 8000 for _, plays_at, p in leg.heard.chunks if plays_at <= time.monotonic())
        await leg.hang_up()  # mid-answer: the scripted reply is far longer than this
    return {"before": before, "after": after, "first": first, "heard_by_carrier": heard_by_carrier}


@pytest.mark.slow
def test_marks_move_the_engines_playout_position_and_hang_up_frees_the_context(cadence_server, tmp_path):
    cfg = AgentConfig(cadence_url=cadence_server.ws_url)
    with AppThread(create_app(cfg)) as phone:
        result = asyncio.run(asyncio.wait_for(_call(phone, cadence_server, spoken(QUESTION, tmp_path)), 120))

    before, after = result["before"], result["after"]
    # audio out, a mark after each chunk, none acknowledged: no report
    assert before["reports"] == [] and before["held"] > 3 and abs(before["pending"] - before["held"]) <= 1, before
    assert before["engine_streams"] == 1  # the answer's engine context is open
    contexts = {c for c, _ in after}
    played = [p for _, p in after]
    assert len(contexts) == 1 and played == sorted(played) and played[-1] > 0.5, after
    # Never more than the carrier has played (its clock; the context starts with the call's first audio).
    assert played[-1] <= result["heard_by_carrier"] + 0.05, (played[-1], result["heard_by_carrier"])
    cadence_server.wait_empty(timeout=10)  # the hang-up cancelled the engine context
