"""What one connection may cost the server, and when it is closed: a request that never arrives whole
(slowloris), an idle keep-alive, a pipelined request, a client that stops reading (HTTP: the write stall;
WebSocket: 1008), a half-open WebSocket (keepalive), one connection too many (WebSocket 1013, HTTP 503). Mostly
on the fake engine, whose frames come on a timer."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tts_engine.server import ServerConfig

from .conftest import ServerThread
from .fake_engine import FakeEngine

BODY = {"input": "Hello there, this is a test.", "voice": "ryan"}
OPEN = {"type": "open", "context_id": "a", "voice": "ryan"}


def test_a_client_that_stops_reading_is_closed_with_1008_and_others_are_unaffected(fake_server):
    fake_server.engine.frame_s = 0.0
    slow = connect(fake_server.ws_url, proxy=None, max_queue=1, legacy=True)
    slow.send(json.dumps({**OPEN, "text": "x" * 5000, "end": True, "chunk_schedule": [64]}))
    with connect(fake_server.ws_url, proxy=None) as other:
        other.send(json.dumps({**OPEN, "text": "Fine.", "end": True}))
        while json.loads(other.recv(timeout=10))["type"] != "done":
            pass
    deadline = time.monotonic() + 20
    code = None
    while time.monotonic() < deadline and code is None:
        time.sleep(0.2)
        try:
            while True:
                slow.recv(timeout=0)
        except TimeoutError:
            continue
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd else None
    slow.close()
    assert code == 1008
    fake_server.wait_empty()


def test_idle_keep_alive_outlives_the_bench_clients_expiry():
    """uvicorn's default (5 s) equals httpx's: a request written as the server closed its idle
    connection failed with a read error (run 12, one in 3,503 at 30 req/s). The server keeps idle
    connections longer than the bench client (which is also below the server default) lets them idle."""
    from bench.load.http_target import KEEPALIVE_EXPIRY_S
    from tts_engine.server.run import uvicorn_config

    config = uvicorn_config(None, ServerConfig())
    assert config.timeout_keep_alive == ServerConfig().keep_alive_s == 30.0
    assert KEEPALIVE_EXPIRY_S < 5.0 < config.timeout_keep_alive


def _closed_within(sock: socket.socket, seconds: float, drip: bytes = b"") -> float | None:
    """Seconds until the server closes `sock` (None: still open after `seconds`), sending `drip` a
    byte every 0.1 s meanwhile (a slowloris client)."""
    start = time.monotonic()
    sock.settimeout(0.1)
    sent = 0
    while time.monotonic() - start < seconds:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except TimeoutError:
            pass
        except ConnectionError:
            return time.monotonic() - start
        if sent < len(drip):
            try:
                sock.sendall(drip[sent:sent + 1])
            except ConnectionError:
                return time.monotonic() - start
            sent += 1
    return None


def test_connections_that_never_finish_a_request_are_closed():
    """Slowloris: idle after connecting, headers or a body a byte at a time. uvicorn alone kept each
    open for as long as the client liked; a complete request, a kept-alive connection and a
    WebSocket are untouched by the deadline."""
    cfg = ServerConfig(request_read_timeout_s=0.6, keep_alive_s=1.2)
    head = b"POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    with ServerThread(FakeEngine(), cfg) as s:
        s.wait_ready(5)
        addr = ("127.0.0.1", s.port)
        with socket.create_connection(addr) as idle:  # sends nothing
            assert 1.0 < _closed_within(idle, 4) < 2.5
        with socket.create_connection(addr) as headers:  # never ends its headers
            assert _closed_within(headers, 4, drip=head + b"X-Slow: " + b"a" * 100) < 1.5
        with socket.create_connection(addr) as body:  # ends its headers, then drips a body
            body.sendall(head + b"Content-Length: 100\r\n\r\n")
            assert _closed_within(body, 4, drip=b'{"input": "' + b"a" * 90) < 1.5
        deadline = time.monotonic() + 5
        while 'status="499"} 1.0' not in httpx.get(s.url + "/metrics").text:  # the body's handler saw it go
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with socket.create_connection(addr) as crlf:  # a response, then a stray CRLF: no request, no reprieve
            crlf.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            crlf.settimeout(5)
            assert crlf.recv(4096).startswith(b"HTTP/1.1 200")
            crlf.sendall(b"\r\n")
            assert 1.0 < _closed_within(crlf, 4) < 2.5
        with httpx.Client(timeout=10) as client:  # keep-alive: one connection, idle 0.9 s between requests
            for _ in range(2):
                assert client.post(s.url + "/v1/audio/speech", json=BODY).status_code == 200
                time.sleep(0.9)
            assert client.get(s.url + "/health").status_code == 200
        with connect(s.ws_url, proxy=None) as conn:  # a WebSocket outlives the request deadline
            time.sleep(1.5)
            conn.send(json.dumps({**OPEN, "text": "Hi.", "end": True}))
            assert json.loads(conn.recv(timeout=10))["type"] in ("audio", "done")


def test_a_request_pipelined_behind_a_streaming_response_does_not_cut_it():
    """The second request's deadline starts with its turn: the first response (about 2 s of
    streaming) arrives whole although the second, sent at once, never sends its body."""
    cfg = ServerConfig(request_read_timeout_s=0.5, keep_alive_s=5)
    with ServerThread(FakeEngine(frame_s=0.02), cfg) as s:
        s.wait_ready(5)
        body = json.dumps({**BODY, "input": "A sentence long enough to stream for a second or two. " * 2}).encode()
        head = b"POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        with socket.create_connection(("127.0.0.1", s.port)) as sock:
            sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body + head + b"Content-Length: 50\r\n\r\n")
            sock.settimeout(10)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 200") and b"\r\n0\r\n\r\n" in data, data[:200]


def _speech_request(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (b"POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\n"
            b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


def test_a_response_whose_client_stops_reading_is_cut_and_its_stream_freed_while_a_slow_reader_is_not():
    """A client that stops reading a streamed response without closing (small socket buffers, so that the
    server's fill within a second) is aborted `http_write_stall_s` after the server's writes pause, its
    engine stream cancelled, the cut counted and the response left without its last chunk; one that reads
    slowly but steadily gets its whole response."""
    cfg = ServerConfig(http_write_stall_s=1.0)
    engine = FakeEngine(frame_s=0.002)
    # 1,726 frames (138 s, 6.6 MB) a request, in 64-frame chunks of 245 KB, one every 0.13 s
    body = _speech_request({**BODY, "input": "x" * 2000, "chunk_schedule": [64], "response_format": "pcm"})
    with ServerThread(engine, cfg) as s:
        s.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)  # accepted sockets inherit it
        s.wait_ready(5)

        def client() -> socket.socket:
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            c.connect(("127.0.0.1", s.port))
            c.sendall(body)
            c.settimeout(10)
            assert c.recv(4096).startswith(b"HTTP/1.1 200")
            return c

        with client() as slow:  # 64 KB every 0.05 s, ~1.3 MB/s: under the 1.9 MB/s made, so writes pause and resume
            received, tail = 0, b""
            while chunk := slow.recv(64 * 1024):
                received, tail = received + len(chunk), (tail + chunk)[-16:]
                time.sleep(0.05)
        assert received > 6_500_000 and tail.endswith(b"0\r\n\r\n")  # all of it (less its first 4 KB), completed
        assert 'cadence_http_write_stalls_total 0.0' in httpx.get(s.url + "/metrics").text
        with client() as stalled:
            deadline = time.monotonic() + 10
            while not engine.active:  # its stream is running
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(2.5)  # buffers full within ~0.2 s, then 1 s of stall
            assert not engine.active, "the stalled client's stream still runs"
            tail = b""  # what the sockets' buffers held, then the end of the connection
            while chunk := stalled.recv(1 << 20):
                tail = (tail + chunk)[-16:]
            assert not tail.endswith(b"0\r\n\r\n"), "the response was completed, not cut"
        assert 'cadence_http_write_stalls_total 1.0' in httpx.get(s.url + "/metrics").text
        s.wait_empty()


def test_a_websocket_connect_past_the_connection_limit_is_closed_with_1013_and_counted():
    """max_ws_connections open: the next connect is closed with 1013 at once; when one closes, a connect is
    served again."""
    with ServerThread(FakeEngine(), ServerConfig(max_ws_connections=2)) as s:
        s.wait_ready(5)
        with connect(s.ws_url, proxy=None) as a, connect(s.ws_url, proxy=None) as b:
            for conn in (a, b):  # both served
                conn.send(json.dumps({**OPEN, "text": "Hi.", "end": True}))
                while json.loads(conn.recv(timeout=10))["type"] != "done":
                    pass
            with connect(s.ws_url, proxy=None) as third, pytest.raises(ConnectionClosed) as closed:
                third.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
            assert "limit of 2 connections" in closed.value.rcvd.reason
        deadline = time.monotonic() + 5
        while True:  # a and b closed: room again
            with connect(s.ws_url, proxy=None) as again:
                again.send(json.dumps({**OPEN, "text": "Hi.", "end": True}))
                try:
                    if json.loads(again.recv(timeout=5))["type"] in ("audio", "done"):
                        break
                except ConnectionClosed:  # the server had not yet seen a or b go
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
        assert s.rejections("too_many_connections") >= 1  # the third's (and any early retry's)


def test_an_http_request_past_the_connection_cap_gets_503_with_retry_after_and_is_counted():
    """max_connections open (here idle raw sockets): a request on one more gets the server's 503
    `too_many_connections` with Retry-After, and its connection is closed; one fewer is served; once the idle ones
    close, requests are served again."""
    with ServerThread(FakeEngine(), ServerConfig(max_connections=3)) as s:
        s.wait_ready(5)
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(2)]
        try:
            time.sleep(0.2)  # accepted
            assert httpx.post(s.url + "/v1/audio/speech", json=BODY, timeout=10).status_code == 200  # the third
            idle.append(socket.create_connection(("127.0.0.1", s.port)))
            time.sleep(0.2)
            r = httpx.post(s.url + "/v1/audio/speech", json=BODY, timeout=10)  # the fourth
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1" and r.headers["connection"] == "close"
            assert r.json()["error"]["code"] == "too_many_connections"
            assert "limit of 3 connections" in r.json()["error"]["message"]
        finally:
            for sock in idle:
                sock.close()
        deadline = time.monotonic() + 5
        while (r := httpx.post(s.url + "/v1/audio/speech", json=BODY, timeout=10)).status_code != 200:
            assert r.status_code == 503 and time.monotonic() < deadline  # the server had not yet seen them go
            time.sleep(0.05)
        assert s.rejections("too_many_connections") >= 1
        s.wait_empty()


def test_serve_raises_the_open_file_limit_to_hold_its_connections():
    """`fit_descriptor_limit` (run in a child, whose limits it may change): a soft limit below max_connections +
    spare is raised to fit under the hard limit; past the hard limit it says so instead."""
    import subprocess
    import sys

    script = """
import resource
from tts_engine.server import ServerConfig
from tts_engine.server.run import fit_descriptor_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = 1100 if hard == resource.RLIM_INFINITY else min(1100, hard)  # what the hard limit lets the test ask
resource.setrlimit(resource.RLIMIT_NOFILE, (want // 2, hard))
assert fit_descriptor_limit(ServerConfig(max_connections=want - 100), spare=100) is None
assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == want, resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (want // 2, want // 2 + 50))
warning = fit_descriptor_limit(ServerConfig(max_connections=want - 100), spare=100)
assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == want // 2 + 50
assert warning is not None and f"open-file limit {want // 2 + 50}" in warning and "--max-connections" in warning
print("OK")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "OK", r.stderr


def test_a_half_open_websocket_is_closed_by_its_keepalive_and_its_contexts_freed():
    """A client whose connection went away without a close or a reset (here: a raw socket that stops
    reading and never answers a ping): the server's keepalive closes it after ping interval + timeout and
    the context it held (an open input, no text yet, an engine stream all the same) is cancelled."""
    import base64
    import os

    engine = FakeEngine()
    with ServerThread(engine, ServerConfig(ws_ping_interval_s=0.3, ws_ping_timeout_s=0.3)) as s:
        s.wait_ready(5)
        raw = socket.create_connection(("127.0.0.1", s.port))
        key = base64.b64encode(os.urandom(16)).decode()
        raw.sendall(f"GET /v1/stream HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        raw.settimeout(5)
        assert raw.recv(4096).startswith(b"HTTP/1.1 101")
        payload = json.dumps({**OPEN, "text": ""}).encode()  # input open: no audio, but an engine stream
        mask = os.urandom(4)
        raw.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        deadline = time.monotonic() + 5
        while not engine.active:
            assert time.monotonic() < deadline, "the context never opened"
            time.sleep(0.01)
        opened = time.monotonic()
        while engine.active:  # no pong, ever: closed after ~0.6 s
            assert time.monotonic() < opened + 5, "the half-open connection still holds its context"
            time.sleep(0.02)
        assert time.monotonic() - opened > 0.3
        raw.close()
        s.wait_empty()
