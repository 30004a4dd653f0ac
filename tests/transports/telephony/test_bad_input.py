"""Bad input on the carrier endpoint, over a real socket: starts that are not a carrier's, media
messages that do not parse or decode, messages for another stream, more calls than the cap. Each
gets a clear error (a close code and reason, or a logged drop), the server keeps serving, and
every call's sockets and tasks are released."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.pipeline import AgentConfig
from transports.telephony.endpoint import create_app

from .carrier import CarrierLeg
from .helpers import AppThread, open_sockets


def run(coro, timeout: float = 90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def phone():
    with AppThread(create_app(AgentConfig(cadence_url=None), max_calls=1, handshake_timeout_s=1.0,
                                    require_stream_token=False)) as server:
        yield server


def calls(server: AppThread) -> dict:
    return server.server.config.app.state.calls


def wait_no_calls(server: AppThread, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while calls(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not calls(server), calls(server)


async def _closed_with(server: AppThread, messages: list[str]) -> tuple[int, str]:
    async with connect(f"ws://127.0.0.1:{server.port}/ws", proxy=None) as ws:
        for m in messages:
            await ws.send(m)
        with pytest.raises(ConnectionClosed):
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        return ws.close_code, ws.close_reason


@pytest.mark.parametrize("messages, reason", [
    ([], "no start message within 1 s"),
    (["not json", "{]"], "bad media stream start"),
    (["[1, 2]", "42"], "bad media stream start"),
    ([json.dumps({"event": "connected"}), json.dumps({"event": "start", "start": {}})],
     "not a Twilio, Telnyx, Plivo or Exotel"),
    ([json.dumps({"event": "connected"}), json.dumps({"event": "start", "start": {"streamSid": "", "callSid": "CA1"}})],
     "names no stream id"),
])
def test_a_connection_that_is_no_carrier_stream_is_closed_with_the_reason(phone, messages, reason):
    code, why = run(_closed_with(phone, messages))
    assert code == 1008 and reason in why, (code, why)
    assert not calls(phone)


async def _garbage_in_a_live_call(server: AppThread) -> dict:
    async with connect(f"ws://127.0.0.1:{server.port}/ws", proxy=None) as ws:
        leg = CarrierLeg("twilio", ws)
        await leg.start()
        call = await leg.wait_for(lambda: calls(server).get(leg.stream_id), 30, "call")
        sid = leg.stream_id
        bad = ["not json", "[]", "null", json.dumps({"event": "media", "streamSid": sid, "media": {"payload": "%%%"}}),
               json.dumps({"event": "media", "streamSid": sid, "media": {"payload": 5}}),
               json.dumps({"event": "media", "streamSid": "MZ-someone-else", "media": {"payload": "AAAA"}}),
               json.dumps({"event": "dtmf", "streamSid": sid, "dtmf": {"digit": "Z"}}),
               json.dumps({"event": "mark", "streamSid": sid, "mark": {"name": "never-sent"}}),
               json.dumps({"event": "mark", "streamSid": sid, "mark": 7})]
        for m in bad:
            await ws.send(m)
        await asyncio.sleep(1.0)
        still_up = sid in calls(server) and not ws.close_code
        # A second call past the cap (1) is refused with "try again later".
        async with connect(f"ws://127.0.0.1:{server.port}/ws", proxy=None) as other:
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(other.recv(), 10)
            busy = (other.close_code, other.close_reason)
        await leg.hang_up()
    return {"rejected": call.serializer.rejected, "still_up": still_up, "busy": busy,
            "heard_s": call.serializer.ledger.heard_s}


def test_malformed_and_foreign_messages_are_dropped_and_the_call_goes_on(phone):
    sockets = open_sockets()
    result = run(_garbage_in_a_live_call(phone))
    assert result["still_up"]
    # not JSON, not an object (x2), a payload of the wrong type, another stream's media (base64
    # that is not base64 decodes to nothing in pipecat: no audio, nothing to reject)
    assert result["rejected"] >= 5, result
    assert result["heard_s"] == 0.0  # an unknown mark moves nothing
    assert result["busy"][0] == 1013 and "try again later" in result["busy"][1], result
    wait_no_calls(phone)
    assert open_sockets() <= sockets


def test_the_call_webhooks_answer_with_the_stream_url(phone):
    import urllib.error
    import urllib.request

    for carrier, needle in (("twilio", "<Connect><Stream url="), ("telnyx", 'bidirectionalMode="rtp"'),
                            ("plivo", 'bidirectional="true"')):
        req = urllib.request.Request(f"{phone.url}/{carrier}", data=b"CallSid=CA1", method="POST",
                                     headers={"Host": "bot.example.com", "X-Forwarded-Proto": "https"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read().decode()
            assert r.headers["content-type"].startswith("application/xml")
        assert needle in body and "wss://bot.example.com/ws" in body, body
    # A Host header that is no host name is refused, not written into the answer.
    req = urllib.request.Request(f"{phone.url}/twilio", method="POST", data=b"",
                                 headers={"Host": 'x"/><Hangup/><a b="'})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code == 400 and b"not a host name" in refused.value.read()

