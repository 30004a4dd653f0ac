"""Fair use: per-client stream and connection caps, an idle rule that only real progress resets,
bounded playout reports, input with nothing to speak, and invalid UTF-8 without a log flood."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tts_engine.server import ServerConfig

from .conftest import ServerThread
from .fake_engine import FakeEngine

SPEECH = "/v1/audio/speech"
BODY = {"input": "Hello there.", "voice": "ryan", "language": "english", "stream": False}
OPEN = {"type": "open", "voice": "ryan", "language": "english"}
KEY, OTHER_KEY = "k-first-0123456789abcdef", "k-second-0123456789abcdef"


def ws(server, headers=None):
    return connect(server.ws_url, proxy=None, open_timeout=10, additional_headers=headers)


def send(conn, **message) -> None:
    conn.send(json.dumps(message))


def recv(conn, timeout: float = 10.0) -> dict:
    return json.loads(conn.recv(timeout=timeout))


def until(conn, kind: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while (m := recv(conn, max(0.01, deadline - time.monotonic())))["type"] != kind:
        pass
    return m


def server_with(**kw) -> ServerThread:
    return ServerThread(FakeEngine(), ServerConfig(**kw))


def test_one_client_cannot_take_every_slot_and_others_still_get_served():
    """The attack: many connections of text-less contexts. Past its cap a client gets `client_quota`
    (429 over HTTP), while another client (another key) is still served, and the slots come back."""
    with server_with(api_keys=(KEY, OTHER_KEY), max_streams_per_client=4, max_contexts_per_connection=16) as s:
        s.wait_ready()
        mine = {"Authorization": f"Bearer {KEY}"}
        with ws(s, mine) as a, ws(s, mine) as b:
            for i in range(3):
                send(a, **OPEN, context_id=f"a{i}")
            send(b, **OPEN, context_id="b0")
            send(b, **OPEN, context_id="b1")
            err = until(b, "error")
            assert err["code"] == "client_quota" and err["context_id"] == "b1"
            assert "limit per client is 4" in err["message"]
            r = httpx.post(s.url + SPEECH, json=BODY, headers=mine)
            assert r.status_code == 429 and r.json()["error"]["code"] == "client_quota" and "retry-after" in r.headers
            other = httpx.post(s.url + SPEECH, json=BODY, headers={"Authorization": f"Bearer {OTHER_KEY}"})
            assert other.status_code == 200
            assert s.active_streams() == 4
        s.wait_empty()  # the connections' end freed them
        assert httpx.post(s.url + SPEECH, json=BODY, headers=mine).status_code == 200
        assert s.rejections_with(mine, "client_quota") == 2


def test_without_keys_the_cap_is_per_address():
    with server_with(max_streams_per_client=2) as s:
        s.wait_ready()
        with ws(s) as a:
            send(a, **OPEN, context_id="x")
            send(a, **OPEN, context_id="y")
            send(a, **OPEN, context_id="z")
            assert until(a, "error")["code"] == "client_quota"
            assert httpx.post(s.url + SPEECH, json=BODY).status_code == 429


def test_websocket_connections_are_capped_per_client():
    with server_with(max_ws_connections_per_client=2) as s:
        s.wait_ready()
        with ws(s), ws(s), ws(s) as third:
            with pytest.raises(ConnectionClosed) as closed:
                third.recv(timeout=5)
            assert closed.value.rcvd.code == 1008 and "per client" in closed.value.rcvd.reason
        with ws(s) as again:  # freed with the others
            send(again, **OPEN, context_id="a", text="Hi.", end=True)
            assert until(again, "done")["reason"] == "eos"


def test_empty_appends_and_flushes_do_not_keep_an_idle_context_alive():
    """An empty `append` (or a `flush` of nothing) every so often reset the idle timer: a context with no
    text held its engine slot for ever."""
    with server_with(context_idle_timeout_s=1.0) as s:
        s.wait_ready()
        with ws(s) as conn:
            send(conn, **OPEN, context_id="idle")
            send(conn, **OPEN, context_id="talking")
            deadline = time.monotonic() + 6
            err = None
            while time.monotonic() < deadline and err is None:
                send(conn, type="append", context_id="idle", text="")
                send(conn, type="append", context_id="idle", text=" \n")
                send(conn, type="flush", context_id="idle")
                send(conn, type="append", context_id="talking", text="word ")  # real progress
                try:
                    while (m := recv(conn, 0.25))["type"] != "error":
                        pass
                    err = m
                except TimeoutError:
                    pass
            assert err is not None and err["code"] == "context_idle" and err["context_id"] == "idle"
            send(conn, type="end", context_id="talking")
            assert until(conn, "done")["context_id"] in ("idle", "talking")
        s.wait_empty()


def test_a_playout_report_is_bounded_by_the_audio_sent(fake_server):
    """played_s 1e308 put a stream first in every deadline sort; no more can have been heard than was sent."""
    with ws(fake_server) as conn:
        send(conn, **OPEN, context_id="p", text="Some words to speak here.")
        sent = until(conn, "audio")
        send(conn, type="playout", context_id="p", played_s=1e308)
        send(conn, type="playout", context_id="p", played_s=0.01)
        send(conn, type="cancel", context_id="p")
        done = until(conn, "done")
    stream = fake_server.engine.opened[-1]
    assert [p for p, _ in stream.playout][1] == 0.01
    assert 0 < stream.playout[0][0] <= done["audio_s"] + 1e-6 and stream.playout[0][0] >= sent["duration_s"] - 1e-6


@pytest.mark.parametrize("text", ["\u200b\u200c\u200d", "\u202e\u2066\u2069\u200e", "\ufeff \u2060\n"])
def test_input_of_only_format_characters_is_refused_as_empty(fake_server, text):
    r = httpx.post(fake_server.url + SPEECH, json={**BODY, "input": text})
    assert r.status_code == 422 and "empty" in r.json()["error"]["message"]
    with ws(fake_server) as conn:
        send(conn, **OPEN, context_id="z", text=text, end=True)
        err = until(conn, "error")
        assert err["code"] == "invalid_request" and err["context_id"] == "z"
        send(conn, **OPEN, context_id="y", text=text)
        send(conn, type="end", context_id="y")
        assert until(conn, "error")["code"] == "invalid_request"
    assert all(s.cancelled or not s.text.strip("\u200b\u200c\u200d\u202e\u2066\u2069\u200e\ufeff\u2060 \n")
               for s in fake_server.engine.opened)
    emoji = httpx.post(fake_server.url + SPEECH, json={**BODY, "input": "\U0001f468\u200d\U0001f469"})
    assert emoji.status_code == 200  # a joiner inside something speakable is kept


def _raw_ws(port: int) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    raw.sendall(f"GET /v1/stream HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    assert raw.recv(4096).startswith(b"HTTP/1.1 101")
    return raw


def test_invalid_utf8_closes_with_1007_and_logs_no_traceback(fake_server, caplog):
    payload = b"\xff\xfe{\"type\": \"open\"}"
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            raw = _raw_ws(fake_server.port)
            mask = os.urandom(4)
            masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            raw.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
            close = raw.recv(4096)
            assert close[0] == 0x88 and int.from_bytes(close[2:4], "big") == 1007
            raw.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info], caplog.text
    assert httpx.get(fake_server.url + "/health").status_code == 200


def test_a_client_cannot_pick_its_address_with_x_forwarded_for():
    """uvicorn believes X-Forwarded-For from 127.0.0.1 by default: a local client could take a fresh
    per-address quota with every request. Only `trusted_proxies` are believed."""
    with server_with(max_streams_per_client=1) as s:
        s.wait_ready()
        with ws(s) as conn:
            send(conn, **OPEN, context_id="held")
            time.sleep(0.2)
            r = httpx.post(s.url + SPEECH, json=BODY, headers={"X-Forwarded-For": "203.0.113.9"})
            assert r.status_code == 429 and r.json()["error"]["code"] == "client_quota"
