"""`cadence talk` opens no network port (docs/local.md): once it is up and listening to the
microphone, the process holds no listening TCP socket and no bound UDP socket, so there is nothing
for a network peer to reach and no access policy to apply. A real PulseAudio server, the real command."""

from __future__ import annotations

import signal
import socket

import psutil
import pytest

pytestmark = pytest.mark.slow


def test_talk_listens_on_no_network_port(pulse_server, talk_process):
    talk = talk_process(pulse_server.env)
    talk.wait_for("speak now", 180)
    proc = psutil.Process(talk.proc.pid)
    sockets = [c for p in (proc, *proc.children(recursive=True)) for c in p.net_connections(kind="inet")]
    unconnected_udp = [c for c in sockets if c.type == socket.SOCK_DGRAM and c.laddr and not c.raddr]
    exposed = [c for c in sockets if c.status == psutil.CONN_LISTEN] + unconnected_udp
    assert exposed == [], exposed  # a UDP socket bound and not connected answers anyone too
    talk.proc.send_signal(signal.SIGINT)
    assert talk.finish(30) == 0, talk.text[-2000:]
