"""Each example flow end to end through the real pipeline (transcripts in, the scripted LLM calling
the flow's tools, Cadence TTS on a real server, audio played in real time): it reaches its final
node, calls its functions with the caller's details, changes voice where a node says so (seen in
the engine's requests, on one connection) and speaks its filler while a slow tool runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from flows.examples import booking, triage

from . import scripts
from .harness import FlowCall

EXAMPLES = Path(__file__).resolve().parents[2] / "flows" / "examples"
pytestmark = pytest.mark.slow


def spoken(requests) -> list[str]:
    return [" ".join(r.text.split()) for r in requests]


def test_booking_flow_books_the_table_in_the_callers_words(recorded_server, engine_requests):
    booking.reservations = booking.Reservations(delay_s=0.8)
    call = FlowCall(recorded_server.ws_url, EXAMPLES / "restaurant_booking.yaml", scripts.booking)
    turns = [("party_size", "A table for 4, please."),
             ("date_and_time", "On 2027-03-14 at 19:30."),
             ("name", "My name is Ada Lovelace."),
             ("confirm", "Yes, please book it.")]
    asyncio.run(call.run(turns, timeout_s=90))
    assert not call.speech.errors, call.speech.errors

    assert call.nodes == ["party_size", "date_and_time", "name", "confirm", "booked"]
    assert booking.reservations.bookings == [booking.Booking("TC-101", 4, "2027-03-14", "19:30", "Ada Lovelace")]
    said = spoken(engine_requests)
    # The tool's result came back into the flow: the last node speaks the booking's reference.
    assert said[-1] == "Your table is booked, the reference is TC-101. Goodbye!", said
    # The booking takes 0.8 s: the filler is spoken after the tool is called, before its result.
    filler = "One moment while I check the reservation book."
    assert said.index(filler) == said.index("Booking it now.") + 1 == len(said) - 2, said
    # Voice per node: ryan until the confirm node; from its first utterance on, serena as instructed,
    # over the one WebSocket connection the call opened.
    voices = [(r.speaker, r.instructions) for r in engine_requests]
    readback = next(i for i, text in enumerate(said) if text.startswith("So that is a table for 4"))
    assert set(voices[:readback]) == {("ryan", None)}, voices
    assert set(voices[readback:]) == {("serena", "Warm and unhurried, as when reading details back.")}, voices
    assert {r.language for r in engine_requests} == {"english"}
    assert call.connects == 1


def test_triage_flow_hands_a_technical_problem_off_after_the_usual_fix(recorded_server, engine_requests):
    triage.transfers = triage.Transfers()
    call = FlowCall(recorded_server.ws_url, EXAMPLES / "support_triage.yaml", scripts.triage)
    turns = [("triage", "My internet keeps dropping every few minutes."),
             ("troubleshoot", "No, it is still broken.")]
    asyncio.run(call.run(turns, timeout_s=60))
    assert not call.speech.errors, call.speech.errors

    assert call.nodes == ["triage", "troubleshoot", "hand_off", "transferred"]
    assert triage.transfers.made == [
        triage.Transfer("second-line technical support", "My internet keeps dropping every few minutes.")]
    said = spoken(engine_requests)
    assert said[-2:] == ["I am transferring you to second-line technical support.", "Connecting you now."], said
    hand_off = [(r.speaker, r.instructions) for r in engine_requests[-2:]]
    assert hand_off == [("vivian", "Calm and reassuring.")] * 2
    # The transfer is quick: no filler.
    assert "Just a moment." not in said


def test_triage_flow_ends_the_call_when_the_fix_works(recorded_server, engine_requests):
    triage.transfers = triage.Transfers()
    call = FlowCall(recorded_server.ws_url, EXAMPLES / "support_triage.yaml", scripts.triage)
    asyncio.run(call.run([("triage", "The router light is red."), ("troubleshoot", "Yes, it works now.")],
                         timeout_s=60))
    assert not call.speech.errors, call.speech.errors

    assert call.nodes == ["triage", "troubleshoot", "goodbye"]
    assert triage.transfers.made == []
    assert spoken(engine_requests)[-1] == "Glad it works again. Goodbye!"


def test_the_openai_llm_service_runs_a_flow_streaming_and_calling_tools(recorded_server, engine_requests):
    from pipecat.services.openai.llm import OpenAILLMService

    from .openai_standin import OpenAIStandIn

    triage.transfers = triage.Transfers()
    with OpenAIStandIn(scripts.triage) as llm_server:
        llm = OpenAILLMService(api_key="none", base_url=llm_server.base_url,
                               settings=OpenAILLMService.Settings(model="standin"))
        call = FlowCall(recorded_server.ws_url, EXAMPLES / "support_triage.yaml", llm=llm)
        turns = [("triage", "I was charged twice on my bill.")]
        asyncio.run(call.run(turns, timeout_s=60))
    assert not call.speech.errors, call.speech.errors

    assert call.nodes == ["triage", "hand_off", "transferred"]
    assert triage.transfers.made == [triage.Transfer("billing", "I was charged twice on my bill.")]
    # Each request carried the node's tools; each tool's result went back in the next request.
    tools = [[t["function"]["name"] for t in r.get("tools") or []] for r in llm_server.requests]
    assert tools[:3] == [["classify_issue"], ["classify_issue"], ["transfer_call"]], tools
    results = [m for m in llm_server.requests[-1]["messages"] if m["role"] == "tool"]
    assert [json.loads(m["content"]) for m in results] == [
        {"category": "billing"}, {"status": "transferred", "department": "billing"}]
    assert spoken(engine_requests)[-2:] == ["I am transferring you to billing.", "Connecting you now."]
