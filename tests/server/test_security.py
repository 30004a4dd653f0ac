"""Access: API keys (HTTP and the WebSocket handshake), browser tokens, Origin and Host allow-lists,
/metrics behind its switch, and no listening beyond loopback without keys. Real sockets, real clients."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tts_engine.server import ServerConfig, create_app
from tts_engine.server.security import AccessPolicy, Credentials, read_api_keys, with_api_keys

from .conftest import ServerThread
from .fake_engine import FakeEngine

KEY = "k-test-0123456789abcdef"
OTHER_KEY = "k-other-0123456789abcdef"
SPEECH = "/v1/audio/speech"
BODY = {"input": "Hello there.", "voice": "ryan", "language": "english", "stream": False}
OPEN = {"type": "open", "voice": "ryan", "language": "english", "context_id": "a", "text": "Hi.", "end": True}


def keyed(**kw) -> ServerConfig:
    return ServerConfig(api_keys=(KEY, OTHER_KEY), **kw)


@pytest.fixture
def keyed_server():
    with ServerThread(FakeEngine(), keyed(browser_token_ttl_s=1.0)) as s:
        s.wait_ready()
        yield s


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def speak_ws(url: str, headers: dict | None = None, origin: str | None = None) -> dict:
    """Open one context over the WebSocket; -> its `done` message (raises InvalidStatus if refused)."""
    with connect(url, proxy=None, open_timeout=10, additional_headers=headers, origin=origin) as conn:
        conn.send(json.dumps(OPEN))
        while (m := json.loads(conn.recv(timeout=10)))["type"] != "done":
            pass
        return m


def test_with_keys_every_endpoint_but_health_and_ready_needs_one(keyed_server):
    s = keyed_server
    for headers in ({}, bearer("wrong-key-0123456789"), {"Authorization": KEY}, {"Authorization": "Basic eDp5"}):
        r = httpx.post(s.url + SPEECH, json=BODY, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", headers
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(s.url + "/metrics", headers=headers).status_code == 401
    assert httpx.get(s.url + "/health").status_code == 200 and httpx.get(s.url + "/ready").status_code == 200
    for key in (KEY, OTHER_KEY):
        r = httpx.post(s.url + SPEECH, json=BODY, headers=bearer(key))
        assert r.status_code == 200 and len(r.content) > 0
    assert httpx.get(s.url + "/metrics", headers=bearer(KEY)).status_code == 200
    assert s.rejections_with(bearer(KEY), "unauthorized") == 8


def test_the_websocket_handshake_needs_a_key(keyed_server):
    with pytest.raises(InvalidStatus) as refused:
        speak_ws(keyed_server.ws_url)
    assert refused.value.response.status_code == 403
    assert speak_ws(keyed_server.ws_url, headers=bearer(KEY))["reason"] == "eos"


def test_a_browser_token_works_for_its_lifetime_only_and_never_makes_tokens(keyed_server):
    s = keyed_server
    assert httpx.post(s.url + "/v1/tokens").status_code == 401
    r = httpx.post(s.url + "/v1/tokens", headers=bearer(KEY))
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    token = r.json()["token"]
    assert KEY not in token and r.json()["expires_in"] == 1.0
    # the page's WebSocket (no headers from a browser): the token in the query string
    assert speak_ws(f"{s.ws_url}?access_token={token}")["reason"] == "eos"
    assert httpx.post(s.url + SPEECH, json=BODY, headers=bearer(token)).status_code == 200
    assert httpx.post(s.url + "/v1/tokens", headers=bearer(token)).status_code == 401  # no renewing itself
    with pytest.raises(InvalidStatus):  # a key never travels in a URL
        speak_ws(f"{s.ws_url}?access_token={KEY}")
    with pytest.raises(InvalidStatus):  # nor does a forged token pass
        speak_ws(f"{s.ws_url}?access_token={token[:-2]}xx")
    time.sleep(2.1)  # itsdangerous stamps whole seconds
    assert httpx.post(s.url + SPEECH, json=BODY, headers=bearer(token)).status_code == 401
    with pytest.raises(InvalidStatus):
        speak_ws(f"{s.ws_url}?access_token={token}")


def test_tokens_of_another_process_or_of_a_removed_key_are_refused():
    token = Credentials(AccessPolicy(api_keys=(KEY,))).token_key
    other = Credentials(AccessPolicy(api_keys=(KEY,)))  # another secret
    assert token(other.token("x")) is None
    mine = Credentials(AccessPolicy(api_keys=(KEY,), secret=b"s" * 32))
    assert mine.token_key(mine.token(mine.key(KEY))) == mine.key(KEY)
    removed = Credentials(AccessPolicy(api_keys=(OTHER_KEY,), secret=b"s" * 32))
    assert removed.token_key(mine.token(mine.key(KEY))) is None


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://localhost.evil.example"])
def test_a_cross_site_websocket_gets_no_audio(fake_server, origin):
    with pytest.raises(InvalidStatus) as refused:
        speak_ws(fake_server.ws_url, origin=origin)
    assert refused.value.response.status_code == 403
    r = httpx.post(fake_server.url + SPEECH, json=BODY, headers={"Origin": origin})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert fake_server.engine.opened == []


def test_same_origin_listed_origins_and_clients_without_origin_are_served():
    cfg = ServerConfig(allowed_origins=("https://app.example.com",))
    with ServerThread(FakeEngine(), cfg) as s:
        s.wait_ready()
        assert speak_ws(s.ws_url)["reason"] == "eos"  # not a browser
        assert speak_ws(s.ws_url, origin=s.url)["reason"] == "eos"  # the server's own page
        assert speak_ws(s.ws_url, origin="https://app.example.com")["reason"] == "eos"
        with pytest.raises(InvalidStatus):
            speak_ws(s.ws_url, origin="https://app.example.com.evil.example")


def test_a_rebound_host_name_is_refused_on_a_loopback_server(fake_server):
    """DNS rebinding: evil.example resolves to 127.0.0.1, and its page talks to the server by that name."""
    r = httpx.post(fake_server.url + SPEECH, json=BODY, headers={"Host": f"evil.example:{fake_server.port}"})
    assert r.status_code == 421 and r.json()["error"]["code"] == "host_not_allowed"
    with pytest.raises(InvalidStatus):
        speak_ws(fake_server.ws_url, headers={"Host": "evil.example"})
    for host in (f"localhost:{fake_server.port}", f"127.0.0.1:{fake_server.port}"):
        assert httpx.post(fake_server.url + SPEECH, json=BODY, headers={"Host": host}).status_code == 200


def test_metrics_can_be_switched_off_or_made_public():
    with ServerThread(FakeEngine(), ServerConfig(metrics_enabled=False)) as s:
        s.wait_ready()
        assert httpx.get(s.url + "/metrics").status_code == 404
    with ServerThread(FakeEngine(), keyed(metrics_public=True)) as s:
        s.wait_ready()
        assert httpx.get(s.url + "/metrics").status_code == 200
        assert httpx.post(s.url + SPEECH, json=BODY).status_code == 401


def test_listening_beyond_loopback_needs_keys(tmp_path):
    with pytest.raises(ValueError, match="needs API keys"):
        with_api_keys(ServerConfig(host="0.0.0.0"), {})
    with pytest.raises(ValueError, match="needs API keys"):  # the app refuses it too
        create_app(FakeEngine(), ServerConfig(host="0.0.0.0"))
    keys = tmp_path / "keys"
    keys.write_text(f"# ops keys\n{KEY}\n\n")
    cfg = with_api_keys(ServerConfig(host="0.0.0.0", api_keys_file=str(keys)), {"CADENCE_API_KEYS": f" {OTHER_KEY},"})
    assert cfg.api_keys == (KEY, OTHER_KEY)
    assert with_api_keys(ServerConfig(host="0.0.0.0", allow_unauthenticated=True), {}).api_keys == ()
    assert read_api_keys(None, {}) == ()
    with pytest.raises(FileNotFoundError):
        read_api_keys(tmp_path / "missing")
    with pytest.raises(ValueError, match="at least 16"):
        with_api_keys(ServerConfig(), {"CADENCE_API_KEYS": "short"})
    with pytest.raises(ValueError, match="tls_certfile"):
        ServerConfig(tls_certfile="cert.pem").validate()
    with pytest.raises(ValueError, match="allowed_origins"):
        ServerConfig(allowed_origins=("null",)).validate()


def test_the_agents_page_server_serves_its_page_but_not_its_api_without_a_key():
    from starlette.testclient import TestClient

    from agent.pipeline import AgentConfig
    from agent.server import create_app as agent_app

    policy = AccessPolicy.for_page_server(keyed(host="0.0.0.0"))
    client = TestClient(agent_app(AgentConfig(), access=policy), base_url="http://agent.example")
    assert client.get("/").status_code == 200  # the page holds no secret
    assert client.get("/api/config").status_code == 401
    assert client.post("/api/offer", json={"sdp": "x", "type": "offer"}).status_code == 401
    token = client.post("/api/token", headers=bearer(KEY)).json()["token"]
    assert client.get("/api/config", headers=bearer(token)).status_code == 200
    assert client.get("/api/config", headers={**bearer(KEY), "Origin": "https://evil.example"}).status_code == 403
    assert client.get("/api/config", headers={**bearer(KEY), "Origin": "http://agent.example"}).status_code == 200


def test_tls_serves_https_and_wss_with_the_configured_certificate(tmp_path):
    import ssl
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    cfg = ServerConfig(tls_certfile=str(cert), tls_keyfile=str(key))
    with ServerThread(FakeEngine(), cfg) as s:
        url = s.url.replace("http://", "https://")
        ca = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 30
        while httpx.get(url + "/ready", verify=ca).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.post(url + SPEECH, json=BODY, verify=ca).status_code == 200
        with connect(s.ws_url.replace("ws://", "wss://"), ssl=ca, proxy=None) as conn:
            conn.send(json.dumps(OPEN))
            while json.loads(conn.recv(timeout=10))["type"] != "done":
                pass
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port is not served
            httpx.get(s.url + "/ready")
