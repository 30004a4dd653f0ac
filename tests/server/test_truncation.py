"""No silent truncation: text past what the engine's context holds is refused up front (422 naming the
limit), and a stream the context still cuts short is never reported as a success, on any format."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.sync.client import connect

from tts_engine.server import ServerConfig

from .conftest import ServerThread, real_engine
from .fake_engine import FakeEngine

SPEECH = "/v1/audio/speech"
BODY = {"voice": "ryan", "language": "english", "input": "A sentence whose speech runs past the context. " * 3}


@pytest.fixture
def cut_server():
    """The fake engine with a 10-frame context: a stand-in for a long input reaching the real 2,048 positions."""
    engine = FakeEngine()
    engine.context_frames = 10
    with ServerThread(engine, ServerConfig()) as s:
        s.wait_ready()
        yield s


def test_a_whole_body_response_cut_by_the_context_is_a_422(cut_server):
    for fmt in ("pcm", "wav"):
        r = httpx.post(cut_server.url + SPEECH, json={**BODY, "stream": False, "response_format": fmt})
        assert r.status_code == 422 and r.json()["error"]["code"] == "truncated", r.text
    assert cut_server.rejections("truncated") == 2


@pytest.mark.parametrize("fmt", ["pcm", "wav"])
def test_a_raw_audio_stream_cut_by_the_context_does_not_end_as_complete(cut_server, fmt):
    with httpx.stream("POST", cut_server.url + SPEECH, json={**BODY, "response_format": fmt}) as r:
        assert r.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):  # no terminating chunk: the client sees the cut
            r.read()


def test_an_sse_stream_cut_by_the_context_has_an_error_event_before_its_done(cut_server):
    r = httpx.post(cut_server.url + SPEECH, json={**BODY, "stream_format": "sse"})
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events[-2:]] == ["error", "speech.audio.done"]
    assert events[-2]["error"]["code"] == "truncated" and events[-1]["reason"] == "length"


def test_a_websocket_context_cut_by_the_context_gets_an_error_before_its_done(cut_server):
    with connect(cut_server.ws_url, proxy=None) as conn:
        conn.send(json.dumps({"type": "open", "context_id": "c", "text": BODY["input"], "end": True,
                              "voice": "ryan", "language": "english"}))
        messages = []
        while not messages or messages[-1]["type"] != "done":
            messages.append(json.loads(conn.recv(timeout=10)))
    assert [m["type"] for m in messages[-2:]] == ["error", "done"] and messages[-2]["code"] == "truncated"


def test_the_clients_own_frame_limit_is_a_success(cut_server):
    """`length` because the client asked for at most N frames is what it asked for."""
    r = httpx.post(cut_server.url + SPEECH, json={**BODY, "stream": False, "max_frames": 4})
    assert r.status_code == 200 and len(r.content) == 4 * 1920 * 2


def test_text_past_what_the_real_engines_context_holds_is_refused_up_front(server):
    """5,000 characters once ran ~83 s and ended `length`; the tiny engine's 2,048 positions hold less."""
    before = server.engine.metrics()["active_streams"]
    for body in ({**BODY, "input": "word " * 1000}, {**BODY, "input": "word " * 1000, "stream_format": "sse"}):
        r = httpx.post(server.url + SPEECH, json=body)
        error = r.json()["error"]
        assert r.status_code == 422 and error["code"] == "text_too_long" and error["param"] == "input"
        assert "the limit is 1478" in error["message"] and "2048 positions" in error["message"]
    with connect(server.ws_url, proxy=None) as conn:
        conn.send(json.dumps({"type": "open", "context_id": "w", "voice": "ryan", "language": "english"}))
        for _ in range(3):
            conn.send(json.dumps({"type": "append", "context_id": "w", "text": "word " * 200}))
        err = json.loads(conn.recv(timeout=10))
        assert err["type"] == "error" and err["code"] == "text_too_long" and "2048 positions" in err["message"]
        conn.send(json.dumps({"type": "cancel", "context_id": "w"}))
    assert server.engine.metrics()["active_streams"] <= before + 1
    server.wait_empty(5)


@pytest.mark.slow
def test_the_longest_accepted_text_is_spoken_whole_by_the_real_engine(tiny_checkpoint):
    """At the limit, the tiny engine (random weights: 14.5 characters a second) finishes with `eos`."""
    with ServerThread(real_engine(tiny_checkpoint), ServerConfig()) as s:
        s.wait_ready()
        limit = 1478
        text = ("Sentence number one is here. " * 60)[:limit]
        r = httpx.post(s.url + SPEECH, json={**BODY, "input": text, "stream_format": "sse"}, timeout=600)
        done = json.loads(r.text.strip().splitlines()[-1][6:])
        assert done["type"] == "speech.audio.done" and done["reason"] == "eos", done
