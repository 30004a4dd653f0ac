"""Cloned voices count in a client's quota: `max_voices_per_client` voices and
`max_voice_seconds_per_client` seconds of reference audio (403 `voice_quota` past either, concurrent
uploads included), and a client sees, reads and deletes only its own voices. A real server over the
real engine (CPU) with a tiny Base checkpoint; clients told apart by API key, and without keys by
their source address (127.0.0.1 and 127.0.0.2)."""

from __future__ import annotations

import concurrent.futures

import httpx
import numpy as np
import pytest

from tests.server.conftest import ServerThread, real_engine
from tests.voices.conftest import REFERENCE_TEXT
from tests.voices.test_voices_api import _wav
from tts_engine.server import ServerConfig

KEY_A = "voice-key-a-0123456789abcdef"
KEY_B = "voice-key-b-0123456789abcdef"
VOICES = "/v1/voices"


@pytest.fixture(scope="module")
def quota_server(tiny_base_checkpoint, reference_24k):
    """Keys A and B; 2 voices a client, and seconds for 2.5 references."""
    ref_s = len(reference_24k) / 24000
    cfg = ServerConfig(api_keys=(KEY_A, KEY_B), max_voices_per_client=2, max_voice_seconds_per_client=2.5 * ref_s)
    with ServerThread(real_engine(tiny_base_checkpoint), cfg) as s:
        s.wait_ready()
        yield s


def upload(url: str, audio: bytes, *, key: str | None = None, client: httpx.Client | None = None,
           **fields) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return (client or httpx).post(url + VOICES, files={"audio": ("ref.wav", audio, "audio/wav")}, data=fields,
                                  headers=headers, timeout=120)


def ids(r: httpx.Response) -> set[str]:
    assert r.status_code == 200, r.text
    return {v["id"] for v in r.json()["data"]}


def test_a_client_keeps_at_most_its_voices_and_sees_only_its_own(quota_server, reference_wav_bytes):
    url, a, b = quota_server.url, {"Authorization": f"Bearer {KEY_A}"}, {"Authorization": f"Bearer {KEY_B}"}
    first = upload(url, reference_wav_bytes, key=KEY_A, text=REFERENCE_TEXT)
    second = upload(url, reference_wav_bytes, key=KEY_A)
    assert first.status_code == 201 and second.status_code == 201, (first.text, second.text)
    mine = {first.json()["id"], second.json()["id"]}

    third = upload(url, reference_wav_bytes, key=KEY_A)
    assert third.status_code == 403, third.text
    error = third.json()["error"]
    assert error["code"] == "voice_quota" and "2 voices" in error["message"] and "delete" in error["message"]

    # B: its own quota, none of A's voices (listed, read or deleted), a token counts as its key
    assert ids(httpx.get(url + VOICES, headers=a)) == mine
    assert ids(httpx.get(url + VOICES, headers=b)) == set()
    some = first.json()["id"]
    for r in (httpx.get(url + f"{VOICES}/{some}", headers=b), httpx.delete(url + f"{VOICES}/{some}", headers=b)):
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert httpx.get(url + f"{VOICES}/{some}", headers=a).status_code == 200
    token = httpx.post(url + "/v1/tokens", headers=a).json()["token"]
    assert ids(httpx.get(url + VOICES, headers={"Authorization": f"Bearer {token}"})) == mine
    assert upload(url, reference_wav_bytes, key=token).status_code == 403  # the key's quota

    # deleting a voice frees its place
    assert httpx.delete(url + f"{VOICES}/{some}", headers=a).json()["deleted"] is True
    again = upload(url, reference_wav_bytes, key=KEY_A)
    assert again.status_code == 201, again.text
    for v in ids(httpx.get(url + VOICES, headers=a)):
        httpx.delete(url + f"{VOICES}/{v}", headers=a)


def test_reference_seconds_count_and_concurrent_uploads_cannot_pass_the_cap(quota_server, reference_24k,
                                                                             reference_wav_bytes):
    url, b = quota_server.url, {"Authorization": f"Bearer {KEY_B}"}
    three = _wav(np.concatenate([reference_24k] * 3))  # 3 references' seconds > the 2.5 allowed
    r = upload(url, three, key=KEY_B)
    assert r.status_code == 403 and r.json()["error"]["code"] == "voice_quota", r.text
    assert "s of reference audio" in r.json()["error"]["message"]
    assert ids(httpx.get(url + VOICES, headers=b)) == set()  # nothing kept, nothing reserved
    two = _wav(np.concatenate([reference_24k] * 2))  # fits alone; a second reference would not
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda audio: upload(url, audio, key=KEY_B), [two, reference_wav_bytes]))
    assert sorted(r.status_code for r in results) == [201, 403], [r.text for r in results]
    for v in ids(httpx.get(url + VOICES, headers=b)):
        assert httpx.delete(url + f"{VOICES}/{v}", headers=b).status_code == 200
    assert upload(url, two, key=KEY_B).status_code == 201  # the refused upload left no reservation behind


def test_without_keys_a_client_is_its_address(tiny_base_checkpoint, reference_wav_bytes):
    cfg = ServerConfig(max_voices_per_client=1)
    with ServerThread(real_engine(tiny_base_checkpoint), cfg) as s, \
            httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as other:
        s.wait_ready()
        mine = upload(s.url, reference_wav_bytes)
        theirs = upload(s.url, reference_wav_bytes, client=other)
        assert mine.status_code == 201 and theirs.status_code == 201, (mine.text, theirs.text)
        assert upload(s.url, reference_wav_bytes).status_code == 403
        assert ids(httpx.get(s.url + VOICES)) == {mine.json()["id"]}
        assert ids(other.get(s.url + VOICES)) == {theirs.json()["id"]}
        assert other.delete(s.url + f"{VOICES}/{mine.json()['id']}").status_code == 404
