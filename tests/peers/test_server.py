"""The adapters' shared server over a fake peer: checks, length rule, one-at-a-time worker, errors."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from bench.peers.server import Limits, make_job
from tts_engine.checkpoint import speech_frames
from tts_engine.config import CONFIG_DIR, ModelConfig
from tts_engine.server.schemas import SpeechRequest

from .conftest import FRAME, FakePeer, PeerThread, random_config

BODY = {"model": "peer", "input": "The birch canoe slid on the smooth planks.", "voice": "ryan",
        "language": "english", "response_format": "pcm", "stream_format": "audio"}


def job_for(cfg: ModelConfig, **fields):
    req = SpeechRequest.model_validate({**BODY, **fields})
    return make_job(req, req.input, cfg)


def test_a_random_checkpoint_forces_the_length_real_speech_of_the_text_takes():
    job = job_for(random_config(10.0), voice="Ryan", language="English", temperature=0.7)
    assert job.frames == speech_frames(BODY["input"], 10.0) == 1 + 53
    assert (job.voice, job.language) == ("ryan", "english")
    assert job.sampling == {"temperature": 0.7}  # only what the request set: the package's defaults otherwise
    assert job_for(random_config(), max_frames=5).frames == 5


def test_a_real_checkpoint_stops_on_eos():
    real = ModelConfig.from_file(CONFIG_DIR / "tiny-customvoice.config.json")
    job = job_for(real, max_frames=40)
    assert job.frames is None and job.max_frames == 40


def test_pcm_of_the_forced_length_streams_in_the_peers_pieces():
    peer = FakePeer(pieces=3)
    with PeerThread(peer) as server, httpx.stream("POST", server.url + "/v1/audio/speech", json=BODY) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "audio/pcm" and r.headers["x-sample-rate"] == "24000"
        assert "content-length" not in r.headers  # a streamed (chunked) body
        data = b"".join(r.iter_raw())
    frames = speech_frames(BODY["input"], 14.5)
    pcm = np.frombuffer(data, "<i2")
    assert len(pcm) == frames * FRAME
    assert pcm[0] == round(-0.5 * 32767) and pcm[-1] == round(0.5 * 32767)  # our server's s16le conversion


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"voice": "nobody"}, "voice", "unknown voice 'nobody'"),
    ({"voice": None}, "voice", "needs a voice"),
    ({"language": "klingon"}, "language", "unknown language"),
    ({"input": "  "}, "input", "input is empty"),
    ({"input": None}, "input", "input"),
    ({"temperature": "hot"}, "temperature", "temperature"),
    ({"response_format": "wav"}, "response_format", "not served by peer adapters"),
    ({"stream_format": "sse"}, "stream_format", "not served by peer adapters"),
    ({"chunk_schedule": [1, 2]}, "chunk_schedule", "not served by peer adapters"),
    ({"voice": "vivian"}, None, "fake: vivian is not served here"),  # the package's own check
])
def test_bad_requests_get_422_with_a_message_and_reach_no_model(fake_peer, fields, param, words):
    with PeerThread(fake_peer) as server:
        r = httpx.post(server.url + "/v1/audio/speech", json={**BODY, **fields})
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and words in error["message"]
    assert error.get("param") == param
    assert fake_peer.started == []


def test_not_json_and_unknown_paths_get_our_error_bodies(fake_peer):
    with PeerThread(fake_peer) as server:
        r = httpx.post(server.url + "/v1/audio/speech", content=b"{", headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_json"
        r = httpx.post(server.url + "/v1/audio/speech", content=b"hi", headers={"content-type": "text/plain"})
        assert r.status_code == 415
        r = httpx.get(server.url + "/nowhere")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert httpx.get(server.url + "/health").json()["status"] == "ok"


def test_a_failure_before_any_audio_is_a_500_with_a_message():
    with PeerThread(FakePeer(fail=True)) as server:
        r = httpx.post(server.url + "/v1/audio/speech", json=BODY)
    assert r.status_code == 500
    assert r.json()["error"] == {"code": "engine_error", "message": "fake failed: the model fell over"}


def test_requests_run_one_at_a_time_in_arrival_order():
    peer = FakePeer(pieces=2)
    peer.gate = threading.Event()
    texts = [f"Sentence number {i}." for i in range(3)]
    with PeerThread(peer) as server, ThreadPoolExecutor(3) as pool:
        futures = []
        for text in texts:
            futures.append(pool.submit(httpx.post, server.url + "/v1/audio/speech", json={**BODY, "input": text},
                                       timeout=30))
            time.sleep(0.2)  # arrival order
        assert httpx.get(server.url + "/health").json()["unfinished"] == 3
        peer.gate.set()
        sizes = [len(f.result().content) for f in futures]
    assert peer.started == texts and peer.max_active == 1
    assert sizes == [speech_frames(t, 14.5) * FRAME * 2 for t in texts]


def test_max_queue_refuses_with_503_and_retry_after():
    peer = FakePeer(pieces=2)
    peer.gate = threading.Event()
    with PeerThread(peer, Limits(max_queue=1)) as server, ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, server.url + "/v1/audio/speech", json=BODY, timeout=30)
        deadline = time.monotonic() + 10
        while not peer.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        r = httpx.post(server.url + "/v1/audio/speech", json=BODY)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "overloaded"
        peer.gate.set()
        assert first.result().status_code == 200


def test_a_client_that_leaves_mid_stream_stops_the_generation():
    peer = FakePeer(pieces=50)
    peer.gate, peer.free = threading.Event(), 1  # the peer waits after its first piece
    with PeerThread(peer) as server:
        with httpx.stream("POST", server.url + "/v1/audio/speech", json=BODY) as r:
            next(r.iter_raw())
        time.sleep(0.5)  # the server notices the disconnect (ASGI http.disconnect) meanwhile
        peer.gate.set()
        deadline = time.monotonic() + 10
        while not peer.closed:
            assert time.monotonic() < deadline, "the peer's generator was never closed"
            time.sleep(0.01)
        assert peer.yielded <= 2  # the piece it was holding, then it stopped
        assert httpx.get(server.url + "/health").json()["unfinished"] == 0
