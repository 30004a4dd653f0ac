"""Who may use `cadence demo`'s page server: its API (`/api/config`, `/api/offer`) behind API keys and
short-lived browser tokens, Origin and Host allow-lists on every route, a refusal to listen beyond
loopback without keys, and the `[server]` table of the demo's settings file. Real uvicorn on a
loopback port, real HTTP (httpx). The models are not loaded (a no-op preload): nothing here needs them,
and an offer past the guard is told apart from a refused one by its 422."""

from __future__ import annotations

import time

import httpx
import pytest

from agent.demo import load_access, sign_in_link
from agent.pipeline import AgentConfig
from tts_engine.server.config import ServerConfig
from tts_engine.server.security import AccessPolicy, with_api_keys

from .test_server import _AppThread

KEY = "demo-key-0123456789abcdef"
OFFER = {"sdp": "hello", "type": "offer"}  # past the guard: 422, not an SDP


@pytest.fixture
def page_server(monkeypatch):
    """The agent's app with the demo's policy for a keyed loopback server, tokens valid 1 s."""
    import agent.server

    monkeypatch.setattr(agent.server, "preload", lambda cfg: None)
    access = with_api_keys(ServerConfig(port=0, browser_token_ttl_s=1.0), {"CADENCE_API_KEYS": KEY})
    policy = AccessPolicy.for_page_server(access)
    with _AppThread(agent.server.create_app(AgentConfig(), access=policy)) as app:
        app.policy = policy
        yield app


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def test_the_page_is_public_its_api_needs_a_token(page_server):
    url = page_server.url
    page = httpx.get(url)
    assert page.status_code == 200 and "access_token" in page.text and KEY not in page.text
    assert httpx.get(url + "ready").status_code == 200 and httpx.get(url + "health").status_code == 200
    for headers in ({}, bearer("not-a-token"), {"Authorization": KEY}):
        for r in (httpx.get(url + "api/config", headers=headers), httpx.post(url + "api/offer", json=OFFER,
                                                                               headers=headers),
                  httpx.patch(url + "api/offer", json={"pc_id": "x", "candidates": []}, headers=headers)):
            assert r.status_code == 401, (headers, r.request.method, r.text)
            assert "Bearer" in r.json()["error"]["message"] and r.headers["www-authenticate"].startswith("Bearer")

    made = httpx.post(url + "api/token", headers=bearer(KEY))
    assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
    token = made.json()["token"]
    assert KEY not in token
    assert httpx.post(url + "api/token", headers=bearer(token)).status_code == 401  # a token makes no tokens
    config = httpx.get(url + "api/config", headers=bearer(token))
    assert config.status_code == 200 and config.json()["llm"].startswith("OFFLINE SCRIPTED LLM")
    assert httpx.post(url + "api/offer", json=OFFER, headers=bearer(token)).status_code == 422
    # the page's own origin, as Chromium sends it on the page's POST
    own = url.rstrip("/")
    assert httpx.post(url + "api/offer", json=OFFER, headers={**bearer(token), "Origin": own}).status_code == 422


def test_a_token_expires(page_server):
    token = httpx.post(page_server.url + "api/token", headers=bearer(KEY)).json()["token"]
    assert httpx.get(page_server.url + "api/config", headers=bearer(token)).status_code == 200
    time.sleep(2.1)  # itsdangerous stamps whole seconds; the token lasts 1 s
    r = httpx.get(page_server.url + "api/config", headers=bearer(token))
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


def test_cross_site_and_rebound_requests_are_refused_even_with_a_token(page_server):
    url = page_server.url
    token = httpx.post(url + "api/token", headers=bearer(KEY)).json()["token"]
    for origin in ("https://evil.example", "null", url.rstrip("/").replace("127.0.0.1", "localhost")):
        for r in (httpx.get(url + "api/config", headers={**bearer(token), "Origin": origin}),
                  httpx.post(url + "api/offer", json=OFFER, headers={**bearer(token), "Origin": origin})):
            assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", (origin, r.text)
    # DNS rebinding: evil.example resolving to 127.0.0.1 reaches the server under its own name
    rebound = httpx.get(url + "api/config", headers={**bearer(token), "Host": "evil.example"})
    assert rebound.status_code == 421 and rebound.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(url, headers={"Host": "evil.example"}).status_code == 421  # the page too


def test_the_sign_in_link_carries_a_working_token_not_a_key(page_server):
    link = sign_in_link(page_server.policy, page_server.url)
    page, _, fragment = link.partition("#")
    assert page == page_server.url and fragment.startswith("access_token=") and KEY not in link
    token = fragment.removeprefix("access_token=")
    assert httpx.get(page_server.url + "api/config", headers=bearer(token)).status_code == 200


def test_without_keys_on_loopback_no_token_is_needed_but_origins_are_checked(monkeypatch):
    import agent.server

    monkeypatch.setattr(agent.server, "preload", lambda cfg: None)
    policy = AccessPolicy.for_page_server(with_api_keys(ServerConfig(port=0), {}))
    with _AppThread(agent.server.create_app(AgentConfig(), access=policy)) as app:
        assert httpx.get(app.url + "api/config").status_code == 200
        assert httpx.post(app.url + "api/offer", json=OFFER, headers={"Origin": app.url.rstrip("/")}).status_code == 422
        evil = httpx.post(app.url + "api/offer", json=OFFER, headers={"Origin": "https://evil.example"})
        assert evil.status_code == 403 and "evil.example" in evil.json()["error"]["message"]
        assert httpx.get(app.url + "api/config", headers={"Host": "attacker.example:80"}).status_code == 421


def test_cadence_demo_refuses_to_listen_beyond_loopback_without_keys(monkeypatch, capsys):
    from tts_engine.cli import main

    monkeypatch.delenv("CADENCE_API_KEYS", raising=False)
    assert main(["demo", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "cadence demo: error: listening on 0.0.0.0 needs API keys" in err, err


def test_the_demo_settings_file_server_table(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(f"# demo\n{KEY}\n")
    f = tmp_path / "agent.toml"
    f.write_text(f'voice = "serena"\n[server]\napi_keys_file = "{keys}"\nallowed_origins = ["https://app.example"]\n'
                 'browser_token_ttl_s = 60\n')
    access = load_access(f, {}, host="0.0.0.0", port=0)
    assert access.api_keys == (KEY,) and access.allowed_origins == ("https://app.example",)
    assert access.browser_token_ttl_s == 60.0 and access.host == "0.0.0.0"
    policy = AccessPolicy.for_page_server(access)
    assert policy.needs_key and policy.token_path == "/api/token" and policy.allowed_hosts == ()
    from agent.demo import load_config

    assert load_config(f, {}).voice == "serena"  # the agent's settings skip the [server] table
    env_only = load_access(None, {"CADENCE_API_KEYS": KEY}, host="0.0.0.0", port=0)
    assert env_only.api_keys == (KEY,)
    f.write_text("[server]\nmax_text_chars = 10\n")
    with pytest.raises(ValueError, match="'max_text_chars' is not a page server setting"):
        load_access(f, {}, host="127.0.0.1", port=0)
    f.write_text("[server]\nallowed_origins = [\"null\"]\n")
    with pytest.raises(ValueError, match="allowed_origins"):
        load_access(f, {}, host="127.0.0.1", port=0)
    f.write_text("[server]\nallow_unauthenticated = true\n")
    assert load_access(f, {}, host="0.0.0.0", port=0).api_keys == ()  # stated: a proxy authenticates


@pytest.mark.slow
def test_a_keyed_demo_signs_the_page_in_and_its_engine_child_serves_the_agent(tiny_checkpoint):
    """`cadence demo --model DIR` with CADENCE_API_KEYS: the page's API wants the sign-in link's token,
    and the engine child (on loopback, for the agent alone, whose client sends no key) does not inherit
    the keys, so the agent can use it."""
    import os
    import re
    import signal
    import subprocess
    import sys

    from .helpers import Lines
    from .test_server import REPO

    env = {k: v for k, v in os.environ.items() if not k.startswith("CADENCE_")}
    env |= {"HF_HUB_OFFLINE": "1", "CADENCE_API_KEYS": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", "demo", "--port", "0", "--model",
                             str(tiny_checkpoint)], cwd=REPO, env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    try:
        err = Lines(proc.stderr)
        url = err.wait_for(r"open (http://\S+/) .*API keys: 1", timeout=120).group(1)
        link = err.wait_for(r"sign in at (http://\S+)", timeout=120).group(1)
        assert httpx.get(url + "api/config").status_code == 401
        token = link.partition("#access_token=")[2]
        config = httpx.get(url + "api/config", headers=bearer(token)).json()
        engine = re.match(r"Cadence engine at ws://(127\.0\.0\.1:\d+)/v1/stream", config["tts"]).group(1)
        assert httpx.get(f"http://{engine}/metrics").status_code == 200  # a keyed engine would answer 401
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert "Traceback" not in err.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
