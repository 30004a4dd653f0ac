"""The listening socket that `cadence serve`, `cadence demo` and `cadence phone` share (run.bind)."""

import asyncio
import socket

from tts_engine.server import ServerConfig
from tts_engine.server.run import bind


def test_connections_accepted_on_a_bound_socket_send_small_messages_at_once():
    # The phone's server runs on plain asyncio, which switches Nagle off only for a socket that says it is
    # TCP. With Nagle on, a 20 ms audio message waits for the peer's delayed ACK (its next media message).
    async def accepted_nodelay() -> int:
        sock = bind(ServerConfig(host="127.0.0.1", port=0))
        got = asyncio.get_running_loop().create_future()

        def on_connect(_reader, writer):
            got.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await asyncio.start_server(on_connect, sock=sock)
        _reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        try:
            return await asyncio.wait_for(got, 5)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0
