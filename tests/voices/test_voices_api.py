"""`/v1/voices` on a real server over the real engine (CPU) with a tiny Base checkpoint: clone from
real speech (espeak-ng), use the id over HTTP and WebSocket, list, delete; bad audio is a clear 4xx."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
import soundfile

from tests.server.conftest import ServerThread, real_engine
from tests.server.test_ws_stream import audio_of, collect, send, ws
from tests.voices.conftest import REFERENCE_TEXT, espeak_wav_bytes
from tts_engine.server import ServerConfig

SPEECH = {"model": "qwen3-tts", "input": "Hello there, how are you?", "language": "english", "seed": 7,
          "response_format": "pcm", "stream": False}


@pytest.fixture(scope="module")
def base_server(tiny_base_checkpoint):
    with ServerThread(real_engine(tiny_base_checkpoint), ServerConfig()) as s:
        s.wait_ready()
        yield s


def _wav(samples: np.ndarray, rate: int = 24000, fmt: str = "WAV") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples.astype(np.float32), rate, format=fmt)
    return out.getvalue()


def clone(server, audio: bytes, filename: str = "ref.wav", **fields) -> httpx.Response:
    return httpx.post(server.url + "/v1/voices", files={"audio": (filename, audio, "audio/wav")}, data=fields,
                      timeout=120)


def speak(server, voice: str) -> httpx.Response:
    return httpx.post(server.url + "/v1/audio/speech", json={**SPEECH, "voice": voice}, timeout=120)


def test_clone_list_speak_and_delete(base_server, reference_wav_bytes):
    made = clone(base_server, reference_wav_bytes, text=REFERENCE_TEXT, name="birch")
    assert made.status_code == 201, made.text
    voice = made.json()
    assert voice["id"].startswith("voice_") and voice["mode"] == "in_context" and voice["name"] == "birch"
    assert voice["reference_text"] == REFERENCE_TEXT and 1.0 < voice["reference_seconds"] < 10
    x_vector = clone(base_server, reference_wav_bytes).json()
    assert x_vector["mode"] == "speaker_embedding"

    listed = httpx.get(base_server.url + "/v1/voices").json()
    assert {voice["id"], x_vector["id"]} <= {v["id"] for v in listed["data"]}
    assert httpx.get(base_server.url + f"/v1/voices/{voice['id']}").json() == voice

    pcm = {}
    for v in (voice, x_vector):
        r = speak(base_server, v["id"])
        assert r.status_code == 200, r.text
        pcm[v["id"]] = np.frombuffer(r.content, np.int16)
        assert len(pcm[v["id"]]) > 24000 * 0.5 and np.abs(pcm[v["id"]]).max() > 300
    # Same seed and text, other voice prompt: other audio (the vector rows reach the talker).
    a, b = pcm[voice["id"]], pcm[x_vector["id"]]
    n = min(len(a), len(b))
    assert not np.array_equal(a[:n], b[:n])

    deleted = httpx.delete(base_server.url + f"/v1/voices/{voice['id']}")
    assert deleted.json() == {"id": voice["id"], "object": "voice", "deleted": True}
    assert httpx.get(base_server.url + f"/v1/voices/{voice['id']}").status_code == 404
    assert httpx.delete(base_server.url + f"/v1/voices/{voice['id']}").status_code == 404
    gone = speak(base_server, voice["id"])
    assert gone.status_code == 422 and "cloned voices only" in gone.json()["error"]["message"]


def test_cloned_voice_over_websocket(base_server, reference_wav_bytes):
    voice = clone(base_server, reference_wav_bytes, text=REFERENCE_TEXT).json()
    with ws(base_server) as conn:
        send(conn, type="open", context_id="c", voice=voice["id"], language="english", seed=3,
             text="Good morning to you.", end=True)
        messages = collect(conn, {"c"})
    assert messages[-1]["type"] == "done" and messages[-1]["reason"] in ("eos", "length", "forced")
    pcm = b"".join(base64.b64decode(m["audio"]) for m in audio_of(messages, "c"))
    assert len(pcm) > 2 * 24000 * 0.5


def test_voice_cloned_from_resampled_flac_works(base_server):
    wav, rate = soundfile.read(io.BytesIO(espeak_wav_bytes("A large size in stockings is hard to sell.")))
    r = clone(base_server, _wav(wav, rate, "FLAC"), filename="ref.flac")
    assert r.status_code == 201, r.text
    assert speak(base_server, r.json()["id"]).status_code == 200


BAD_AUDIO = {
    "not audio": (b"this is not a sound file at all" * 10, 415, "not in a readable format"),
    "empty": (b"", 415, "empty"),
    "too short": (_wav(0.3 * np.sin(np.arange(12000) / 24000 * 2 * np.pi * 220)), 422, "too short"),
    "too long": (_wav(0.3 * np.sin(np.arange(24000 * 31) / 24000 * 2 * np.pi * 220)), 422, "too long"),
    "silent": (_wav(np.zeros(24000 * 3)), 422, "silent"),
}


@pytest.mark.parametrize("case", list(BAD_AUDIO))
def test_bad_audio_is_a_clear_4xx(base_server, case):
    data, status, words = BAD_AUDIO[case]
    before = len(httpx.get(base_server.url + "/v1/voices").json()["data"])
    r = clone(base_server, data)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]["message"]
    assert len(httpx.get(base_server.url + "/v1/voices").json()["data"]) == before


def test_bad_requests_are_clear_4xx(base_server):
    r = httpx.post(base_server.url + "/v1/voices", json={"audio": "x"})
    assert r.status_code == 415 and "multipart/form-data" in r.json()["error"]["message"]
    r = httpx.post(base_server.url + "/v1/voices", files={"other": ("a.wav", b"x")})
    assert r.status_code == 422 and "no file field `audio`" in r.json()["error"]["message"]
    big = b"\0" * (9 * 1024 * 1024)
    r = clone(base_server, big)
    assert r.status_code == 413
    assert speak(base_server, "voice_0123456789abcdef").status_code == 422


def test_cloning_needs_a_base_model(tiny_checkpoint, reference_wav_bytes):
    with ServerThread(real_engine(tiny_checkpoint), ServerConfig()) as s:
        s.wait_ready()
        r = clone(s, reference_wav_bytes)
    assert r.status_code == 422 and "needs a Base model" in r.json()["error"]["message"]
