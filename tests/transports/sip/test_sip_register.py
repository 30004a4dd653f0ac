"""Registering to a real registrar: Debian's Kamailio on loopback challenges the bot's REGISTER
(digest auth), keeps its binding (refreshed before it expires), routes a real phone's call
(baresip) for the bot's extension to it, and forgets it once the bot un-REGISTERs at shutdown.
A wrong password, or a registrar that does not answer, is logged and retried with backoff."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

import pytest
from aiosipua import SipUAS
from aiosipua.transport import UdpSipTransport

from agent.pipeline import AgentConfig
from tests.transports.telephony.helpers import free_port
from transports.sip.register import RegisterConfig, Registrant

from .baresip import Baresip, caller_wav
from .conftest import SipThread, loopback_uac
from .kamailio import Kamailio

PASSWORD = "s3cret-Pw"


@pytest.fixture
def registrar(tmp_path):
    (tmp_path / "kamailio").mkdir()
    with Kamailio(tmp_path / "kamailio", PASSWORD) as kamailio:
        yield kamailio


async def _call_status(registrar: Kamailio) -> int:
    """The final answer to an INVITE for the bot's extension, sent to the registrar."""
    transport, uac = await loopback_uac()
    try:
        call = uac.send_invite("sip:caller@127.0.0.1", f"sip:bot@{registrar.address}", ("127.0.0.1", registrar.port))
        try:
            await call.wait_answered(timeout=10)
            return 200
        except RuntimeError:
            return call._reject_code
    finally:
        await transport.stop()


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(0.05)


@pytest.mark.slow
def test_the_bot_registers_refreshes_gets_a_routed_call_and_unregisters(registrar, tmp_path):
    assert asyncio.run(_call_status(registrar)) == 404  # nobody is registered yet
    register = RegisterConfig(registrar.address, "bot", PASSWORD, expires=5)
    # Only 127.0.0.2 may call the bot directly; the registrar is added to the allow-list.
    with SipThread(AgentConfig(cadence_url=None), register=register, allow_from=["127.0.0.2"]) as bot:
        registrant = bot.server.registrant
        _wait(lambda: registrant.registered >= 2, 20, "refreshed registration")  # 200 to REGISTER, then a refresh
        mic = tmp_path / "mic.wav"
        caller_wav(mic, b"", lead_s=1.0, tail_s=10)
        (tmp_path / "phone").mkdir()
        phone = Baresip(tmp_path / "phone", mic)
        seen: dict = {}
        try:
            phone.dial(f"sip:bot@{registrar.address}", seconds=5)  # the extension, at the PBX
            _wait(lambda: seen.update(bot.server.calls) or seen, 20, "call at the bot")
            log = phone.wait(25)
        finally:
            phone.close()
        assert "Call established" in log, log[-2000:]
        (call,) = seen.values()
        assert call.incoming.source_addr == ("127.0.0.1", registrar.port)  # routed by the registrar
        _wait(lambda: not bot.server.calls, 10, "hang-up")
        assert call.by_caller  # the phone's BYE came through the registrar
        assert not registrant.failures and bot.server.refused == {}
    assert asyncio.run(_call_status(registrar)) == 404  # unregistered at shutdown


@pytest.mark.parametrize("case", ["wrong password", "no registrar"])
def test_a_failed_registration_is_logged_and_retried_with_backoff(registrar, case):
    address = registrar.address if case == "wrong password" else f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"

    async def scenario():
        transport = UdpSipTransport(local_addr=("127.0.0.1", free_port(socket.SOCK_DGRAM)))
        uas = SipUAS(transport)
        await uas.start()
        registrant = Registrant(uas, RegisterConfig(address, "bot", "not-the-password"),
                                advertised=transport.local_addr, backoff_s=(0.3, 5.0), answer_timeout_s=1.0)
        try:
            registrant.start()
            async with asyncio.timeout(30):
                while len(registrant.failures) < 4:
                    await asyncio.sleep(0.05)
            return registrant
        finally:
            await registrant.stop()
            await uas.stop()

    registrant = asyncio.run(scenario())
    expected = "401" if case == "wrong password" else "no answer"
    assert all(why.startswith(expected) for _, why in registrant.failures), registrant.failures
    assert registrant.registered == 0 and registrant.attempts >= 4
    at = [t for t, _ in registrant.failures]
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert gaps[2] > gaps[0] + 0.6, gaps  # 0.3, 0.6, 1.2 s waits (plus the answer time): it backs off
