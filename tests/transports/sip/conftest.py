"""The SIP listener on a loopback port, on an event loop of its own in a thread (as `cadence phone`
runs it beside the carrier endpoint)."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from agent.pipeline import AgentConfig
from tests.transports.telephony.helpers import free_port
from transports.sip.server import SipServer


class SipThread:
    def __init__(self, cfg: AgentConfig, **kwargs):
        self.loop = asyncio.new_event_loop()
        self.server = SipServer(cfg, host="127.0.0.1", port=free_port(socket.SOCK_DGRAM), **kwargs)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def call(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def tasks(self) -> int:
        async def count():
            return len([t for t in asyncio.all_tasks() if not t.done()]) - 1  # less this one
        return self.call(count())

    @property
    def uri(self) -> str:
        return f"sip:bot@127.0.0.1:{self.server.port}"

    def __enter__(self) -> SipThread:
        from agent.server import preload

        self.thread.start()
        self.call(asyncio.to_thread(preload, self.server.cfg), timeout=120)
        self.call(self.server.start())
        return self

    def __exit__(self, *exc) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def sip_bot():
    with SipThread(AgentConfig(cadence_url=None)) as bot:
        yield bot


async def loopback_uac(host: str = "127.0.0.1"):
    """A SIP user agent client (aiosipua's) on a loopback UDP port: (its transport, the UAC)."""
    from aiosipua import SipResponse, SipUAC
    from aiosipua.transport import UdpSipTransport

    transport = UdpSipTransport(local_addr=(host, free_port(socket.SOCK_DGRAM)))
    uac = SipUAC(transport)
    transport.on_message = lambda msg, addr: uac.handle_response(msg, addr) if isinstance(msg, SipResponse) else None
    await transport.start()
    return transport, uac
