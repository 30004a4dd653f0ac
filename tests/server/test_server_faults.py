"""What the real engine cannot be made to do on demand, on the fake engine: fail mid-stream, stay
unready, never confirm a cancel; and a real engine's injected fault. What a connection may cost (deadlines,
stalls, caps, keepalive) is in test_server_connections.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from dataclasses import replace

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tts_engine.server import ServerConfig

from .conftest import ServerThread
from .fake_engine import FakeEngine

BODY = {"input": "Hello there, this is a test.", "voice": "ryan"}
OPEN = {"type": "open", "context_id": "a", "voice": "ryan"}


class SlowStartEngine(FakeEngine):
    """Warm-up lasts until `finish_warm_up()` is called (from any thread)."""

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.go = asyncio.Event()
        await self.go.wait()
        self.ready = True

    def finish_warm_up(self) -> None:
        self.loop.call_soon_threadsafe(self.go.set)


def test_ready_is_503_during_warm_up_and_websocket_connect_gets_1013():
    engine = SlowStartEngine()
    with ServerThread(engine, ServerConfig()) as s:
        assert httpx.get(s.url + "/health").json() == {"status": "starting"}
        r = httpx.get(s.url + "/ready")
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        r = httpx.post(s.url + "/v1/audio/speech", json=BODY)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
        assert "retry-after" in r.headers
        with connect(s.ws_url, proxy=None) as conn, pytest.raises(ConnectionClosed) as info:
            conn.recv(timeout=5)
        assert info.value.rcvd.code == 1013
        engine.finish_warm_up()
        s.wait_ready(5)
        assert httpx.post(s.url + "/v1/audio/speech", json=BODY).status_code == 200


class BuggyEngine(FakeEngine):
    """open_stream fails the way a bug would (not an ApiError): the server's 500 path."""

    def open_stream(self, options, text="", *, end_input=False):
        raise RuntimeError("a bug")


def test_a_server_bug_is_a_500_with_a_message_and_counted():
    with ServerThread(BuggyEngine(), ServerConfig()) as s:
        s.wait_ready(5)
        r = httpx.post(s.url + "/v1/audio/speech", json=BODY)
        assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error", r.text
        text = httpx.get(s.url + "/metrics").text
        assert 'cadence_http_responses_total{endpoint="/v1/audio/speech",status="500"} 1.0' in text


def test_a_client_gone_before_its_body_arrives_is_counted_not_logged_as_a_fault(fake_server):
    records = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", fake_server.port)) as sock:
                sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100\r\n\r\n{\"in")
        deadline = time.monotonic() + 5
        line = 'cadence_http_responses_total{endpoint="/v1/audio/speech",status="499"} 3.0'
        while line not in httpx.get(fake_server.url + "/metrics").text:
            assert time.monotonic() < deadline, "the three disconnects were not counted"
            time.sleep(0.05)
    finally:
        logger.removeHandler(handler)
    assert not records, [r.getMessage() for r in records]
    assert httpx.post(fake_server.url + "/v1/audio/speech", json=BODY).status_code == 200


def test_health_is_503_after_an_engine_fault(fake_server):
    fake_server.engine.alive = False
    assert httpx.get(fake_server.url + "/health").status_code == 503
    assert httpx.get(fake_server.url + "/ready").status_code == 503


def test_engine_error_mid_stream(fake_server):
    fake_server.engine.fail_after_frames = 3
    r = httpx.post(fake_server.url + "/v1/audio/speech", json={**BODY, "stream_format": "sse"})
    events = [json.loads(b.removeprefix("data: ")) for b in r.text.split("\n\n") if b]
    assert events[0]["type"] == "speech.audio.delta"
    assert events[-1] == {"type": "error", "error": {"code": "engine_error", "message": "injected fault"}}
    with pytest.raises(httpx.RemoteProtocolError):  # raw audio: the response is cut short
        httpx.post(fake_server.url + "/v1/audio/speech", json=BODY)
    fake_server.engine.fail_after_frames = 0  # before any audio: a proper status
    r = httpx.post(fake_server.url + "/v1/audio/speech", json=BODY)
    assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
    fake_server.engine.fail_after_frames = 3
    with connect(fake_server.ws_url, proxy=None) as conn:
        conn.send(json.dumps({**OPEN, "text": BODY["input"], "end": True}))
        messages = []
        while not messages or messages[-1]["type"] != "done":
            messages.append(json.loads(conn.recv(timeout=5)))
        assert messages[-2] == {"type": "error", "context_id": "a", "code": "engine_error",
                                "message": "injected fault"}
        assert messages[-1]["reason"] == "error" and messages[-1]["frames"] == 3
    fake_server.wait_empty()


def test_cancel_is_acknowledged_even_if_the_engine_never_confirms():
    engine = FakeEngine(frame_s=0.02)
    engine.ignore_cancel = True
    with ServerThread(engine, ServerConfig(cancel_ack_timeout_s=0.3)) as s:
        s.wait_ready()
        with connect(s.ws_url, proxy=None) as conn:
            conn.send(json.dumps({**OPEN, "text": "x" * 200, "end": True}))
            assert json.loads(conn.recv(timeout=5))["type"] == "audio"
            t0 = time.monotonic()
            conn.send(json.dumps({"type": "cancel", "context_id": "a"}))
            while (m := json.loads(conn.recv(timeout=5)))["type"] != "done":
                assert m["type"] != "audio" or time.monotonic() - t0 < 0.05
            assert m["reason"] == "cancelled" and time.monotonic() - t0 >= 0.25


def test_error_table_matches_the_docs():
    from pathlib import Path

    from tts_engine.server.errors import markdown_table

    doc = (Path(__file__).parents[2] / "docs" / "streaming-api.md").read_text()
    assert markdown_table() in doc


def test_config_rejects_nonsense():
    with pytest.raises(ValueError, match="max_text_chars"):
        replace(ServerConfig(), max_text_chars=0).validate()
    with pytest.raises(ValueError, match="port"):
        ServerConfig(port=70000).validate()
    with pytest.raises(ValueError, match="keep_alive_s must be > 0"):
        ServerConfig(keep_alive_s=0).validate()


def test_a_context_idle_with_its_input_open_is_cancelled_and_others_are_not():
    """An open context that gets no text holds an engine slot: past context_idle_timeout_s it is
    cancelled with an error event, its done follows; one fed text in time, and one whose input
    has ended, are untouched."""
    with ServerThread(FakeEngine(), ServerConfig(context_idle_timeout_s=0.4)) as s:
        s.wait_ready(5)
        with connect(s.ws_url, proxy=None) as conn:
            conn.send(json.dumps({**OPEN, "context_id": "idle"}))
            conn.send(json.dumps({**OPEN, "context_id": "fed"}))
            for i in range(8):  # 1.2 s of text, a word every 0.15 s
                conn.send(json.dumps({"type": "append", "context_id": "fed", "text": f"word{i} "}))
                time.sleep(0.15)
            conn.send(json.dumps({"type": "end", "context_id": "fed"}))
            messages = []
            while not {"idle", "fed"} <= {m.get("context_id") for m in messages if m["type"] == "done"}:
                messages.append(json.loads(conn.recv(timeout=10)))
        idle = [m for m in messages if m.get("context_id") == "idle"]
        assert [m["type"] for m in idle] == ["error", "done"], idle
        assert idle[0]["code"] == "context_idle" and idle[1]["reason"] == "cancelled"
        fed = [m for m in messages if m.get("context_id") == "fed"]
        assert not [m for m in fed if m["type"] == "error"] and fed[-1]["reason"] != "cancelled", fed
        s.wait_empty()


class MidStreamBugEngine(FakeEngine):
    """Its streams fail like a bug (an exception, not an error event) after their first audio."""

    def open_stream(self, options, text="", *, end_input=False):
        stream = super().open_stream(options, text, end_input=end_input)
        events = stream.events

        async def failing():
            async for event in events():
                yield event
                raise RuntimeError("a bug mid-stream")

        stream.events = failing
        return stream


def test_a_bug_after_the_status_line_is_counted_once():
    with ServerThread(MidStreamBugEngine(), ServerConfig()) as s:
        s.wait_ready(5)
        with (httpx.Client(timeout=10) as client, contextlib.suppress(httpx.HTTPError),
              client.stream("POST", s.url + "/v1/audio/speech", json=BODY) as r):
            assert r.status_code == 200
            for _ in r.iter_raw():
                pass
        text = httpx.get(s.url + "/metrics").text
        assert 'cadence_http_responses_total{endpoint="/v1/audio/speech",status="200"} 1.0' in text
        assert 'status="500"' not in text, text


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the engine thread re-raises
def test_a_real_engine_fault_is_loud_in_flight_and_later_requests_fail_fast(tiny_checkpoint):
    """reliability.md: a forward that raises after N calls. The stream in flight gets its error (an SSE error
    event after its first audio), /health and /ready turn 503, a new request is a 503 `engine_unavailable`
    at once (no engine work), and a WebSocket connect is closed with 1013."""
    import itertools

    from .conftest import real_engine

    engine = real_engine(tiny_checkpoint)
    with ServerThread(engine, ServerConfig()) as s:
        s.wait_ready()
        frame_step, calls = engine.runner.frame_step_async, itertools.count()

        def faulty_frame_step(*args, **kwargs):  # the engine thread's forward, the sixth time on
            if next(calls) >= 5:
                raise RuntimeError("injected forward fault")
            return frame_step(*args, **kwargs)

        engine.runner.frame_step_async = faulty_frame_step
        long = {**BODY, "input": "A sentence long enough to outlast five frame steps. " * 3}
        r = httpx.post(s.url + "/v1/audio/speech", json={**long, "stream_format": "sse"}, timeout=60)
        events = [json.loads(b.removeprefix("data: ")) for b in r.text.split("\n\n") if b]
        assert events[0]["type"] == "speech.audio.delta"
        assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "engine_error"
        assert "injected forward fault" in events[-1]["error"]["message"]
        assert httpx.get(s.url + "/health").status_code == 503
        assert httpx.get(s.url + "/ready").status_code == 503
        t0 = time.monotonic()
        r = httpx.post(s.url + "/v1/audio/speech", json=BODY, timeout=10)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
        assert "injected forward fault" in r.json()["error"]["message"] and "retry-after" in r.headers
        assert time.monotonic() - t0 < 1.0
        with connect(s.ws_url, proxy=None) as conn, pytest.raises(ConnectionClosed) as closed:
            conn.recv(timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        engine._thread.join(timeout=10)  # it re-raises: let it end under this test's filter
