"""`python -m bench.peers.qwen_tts` as the benchmark runs it: a real process on the tiny random
checkpoint, a real socket, the official qwen-tts package underneath (installed for parity tests)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.official import official_available
from tts_engine.checkpoint import speech_frames

from .conftest import FRAME

REPO = Path(__file__).resolve().parents[2]
TEXT = "Hi."
BODY = {"model": "qwen-tts", "input": TEXT, "voice": "ryan", "language": "english", "response_format": "pcm",
        "stream_format": "audio"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint, tmp_path_factory):
    """The adapter's URL. Its output goes to a file: the packages log a lot, and a full pipe would
    stall the process."""
    if not official_available():  # as the `official` fixture, without importing it here
        pytest.fail("qwen-tts and transformers==4.57.3 must be installed (see README: the test command)")
    port = free_port()
    log = tmp_path_factory.mktemp("qwen-tts-peer") / "out.log"
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": path}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bench.peers.qwen_tts", "--model", str(tiny_checkpoint),
                                 "--port", str(port), "--device", "cpu"], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, f"the adapter exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the adapter never answered:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def pcm_of(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/pcm" and response.headers["x-sample-rate"] == "24000"
    assert len(response.content) % 2 == 0
    return np.frombuffer(response.content, "<i2")


def test_speech_is_the_whole_pcm_of_the_forced_length_in_one_streamed_body(adapter):
    r = httpx.post(adapter + "/v1/audio/speech", json=BODY, timeout=60)
    pcm = pcm_of(r)
    assert r.headers.get("transfer-encoding") == "chunked" and r.headers["x-peer"] == "qwen-tts"
    # Every generated frame is sent, frame 0 included (our engine drops frame 0 of a built-in voice).
    assert len(pcm) == speech_frames(TEXT, 14.5) * FRAME
    assert np.abs(pcm.astype(np.int32)).max() > 300 and len(np.unique(pcm)) > 100  # sound, not silence


def test_concurrent_requests_wait_their_turn_and_a_seed_repeats_the_audio(adapter):
    body = {**BODY, "seed": 7, "max_frames": 3}
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda _: httpx.post(adapter + "/v1/audio/speech", json=body, timeout=60), range(2))
    first, second = pcm_of(a), pcm_of(b)
    assert len(first) == 3 * FRAME
    assert np.array_equal(first, second)  # one at a time, each seeded before it runs


@pytest.mark.parametrize(("fields", "words"), [
    ({"voice": "nobody"}, "unknown voice 'nobody'"),
    ({"input": ""}, "input is empty"),
    ({"response_format": "wav"}, "response_format 'wav' is not served"),
])
def test_a_bad_request_gets_422_with_a_message(adapter, fields, words):
    r = httpx.post(adapter + "/v1/audio/speech", json={**BODY, **fields}, timeout=60)
    assert r.status_code == 422
    assert words in r.json()["error"]["message"]
