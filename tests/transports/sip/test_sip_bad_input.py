"""Bad input on the SIP listener, from a real SIP user agent (aiosipua's UAC) over loopback: an
INVITE with no codec in common (488), a flood of INVITEs past the call cap (486 at once, holding
nothing), RTP from a host the call did not name (dropped). The bot keeps serving; once the calls
hang up, its calls, the UAS's dialogs, its tasks and its sockets are back where they started."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from aiosipua import build_sdp

from agent.pipeline import AgentConfig
from tests.transports.telephony.helpers import free_port, open_sockets

from .conftest import SipThread, loopback_uac

FLOOD = 24
CAP = 2


@pytest.fixture
def capped_bot():
    with SipThread(AgentConfig(cadence_url=None), max_calls=CAP) as bot:
        yield bot


async def _invite(uac, bot, *, payload_type: int, codec: str, rtp_port: int):
    sdp = build_sdp(local_ip="127.0.0.1", rtp_port=rtp_port, payload_type=payload_type, codec_name=codec,
                    sample_rate=16000 if codec == "G722" else 8000)
    return uac.send_invite("sip:caller@127.0.0.1", bot.uri, ("127.0.0.1", bot.server.port), sdp_offer=sdp)


async def _outcome(call) -> int:
    try:
        await call.wait_answered(timeout=20)
        return 200
    except RuntimeError:
        return call._reject_code


def test_an_invite_with_no_common_codec_is_refused_with_488(sip_bot):
    async def scenario():
        transport, uac = await loopback_uac()
        try:
            call = await _invite(uac, sip_bot, payload_type=9, codec="G722", rtp_port=free_port(socket.SOCK_DGRAM))
            return await _outcome(call)
        finally:
            await transport.stop()

    assert asyncio.run(scenario()) == 488
    deadline = time.monotonic() + 5
    while sip_bot.server.calls and time.monotonic() < deadline:  # the refusal's clean-up follows it
        time.sleep(0.02)
    assert sip_bot.server.refused == {488: 1} and not sip_bot.server.calls
    assert not sip_bot.server._uas.active_calls


@pytest.mark.slow
def test_an_invite_flood_is_bounded_rtp_from_elsewhere_is_dropped_and_nothing_leaks(capped_bot):
    bot = capped_bot
    tasks, sockets = bot.tasks(), open_sockets()
    media = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(FLOOD)]
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.2", 0))  # another host on the loopback network

    async def scenario():
        transport, uac = await loopback_uac()
        try:
            for s in media:
                s.bind(("127.0.0.1", 0))
            calls = [await _invite(uac, bot, payload_type=0, codec="PCMU", rtp_port=s.getsockname()[1]) for s in media]
            outcomes = await asyncio.gather(*(_outcome(c) for c in calls))
            answered = [c for c, o in zip(calls, outcomes, strict=True) if o == 200]
            # RTP to an answered call's port from a host its SDP did not name
            for call in answered:
                host, port = call.sdp_answer.rtp_address
                for seq in range(50):
                    header = bytes([0x80, 0x00]) + seq.to_bytes(2, "big") + (seq * 160).to_bytes(4, "big") + b"\0\0\0\7"
                    stranger.sendto(header + b"\xff" * 160, (host, port))
            await asyncio.sleep(1.0)
            foreign = [c.foreign_rtp for c in bot.server.calls.values()]
            for call in answered:
                call.hangup(uac)
            deadline = time.monotonic() + 20
            while bot.server.calls and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return outcomes, foreign
        finally:
            await transport.stop()

    try:
        outcomes, foreign = asyncio.run(asyncio.wait_for(scenario(), 90))
    finally:
        for s in (*media, stranger):
            s.close()
    assert sorted(outcomes).count(200) == CAP and outcomes.count(486) == FLOOD - CAP, outcomes
    assert bot.server.refused == {486: FLOOD - CAP}
    assert foreign == [50] * CAP  # every packet from the stranger dropped, in both calls
    assert not bot.server.calls and not bot.server._uas.active_calls
    deadline = time.monotonic() + 10
    while (bot.tasks() > tasks or open_sockets() > sockets) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert bot.tasks() <= tasks and open_sockets() <= sockets


def test_an_invite_from_outside_the_allow_list_is_refused_with_403():
    """Only 127.0.0.2 may call: an INVITE from 127.0.0.1 gets 403 before anything is looked at;
    one from 127.0.0.2 passes the list (and is then refused for its codec, 488)."""
    async def scenario(bot, host):
        transport, uac = await loopback_uac(host)
        try:
            call = await _invite(uac, bot, payload_type=9, codec="G722", rtp_port=free_port(socket.SOCK_DGRAM))
            return await _outcome(call)
        finally:
            await transport.stop()

    with SipThread(AgentConfig(cadence_url=None), allow_from=["127.0.0.2/32"]) as bot:
        assert asyncio.run(scenario(bot, "127.0.0.1")) == 403
        assert asyncio.run(scenario(bot, "127.0.0.2")) == 488
        deadline = time.monotonic() + 5
        while bot.server.calls and time.monotonic() < deadline:
            time.sleep(0.02)
        assert bot.server.refused == {403: 1, 488: 1} and not bot.server.calls
        assert not bot.server._uas.active_calls
