"""Readiness: the agent server answers at once while its models load (`/health` 200, `/ready` 503,
offers 503 + Retry-After), `/ready` turns 200 with the load time once they are in (or says why they
failed), and `cadence demo` prints its URL at once and "ready" with the load time later."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from agent.pipeline import AgentConfig

from .helpers import Lines
from .test_server import REPO, _AppThread


def _get(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


class _LoadingApp(_AppThread):
    """The app on a socket without waiting for its models (they are the test's to release)."""

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the agent server did not start"
            time.sleep(0.05)
        return self


def test_the_server_answers_while_the_models_load_and_says_when_they_are_in(monkeypatch):
    from agent import server

    release, reports = threading.Event(), []
    monkeypatch.setattr(server, "preload", lambda cfg: release.wait(30))  # a slow load, held by the test
    app = server.create_app(AgentConfig(), on_ready=reports.append)
    with _LoadingApp(app) as running:
        assert _get(running.url + "health")[0] == 200
        status, _, body = _get(running.url + "ready")
        assert status == 503 and body["ready"] is False and body["loading_s"] >= 0
        offer = json.dumps({"sdp": "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n", "type": "offer"}).encode()
        status, headers, body = _get(running.url + "api/offer", "POST", offer)
        assert status == 503 and headers["retry-after"] == "1" and "loading" in body["detail"]
        release.set()
        deadline = time.monotonic() + 10
        while (ready := _get(running.url + "ready"))[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert ready[2]["ready"] is True and ready[2]["load_s"] >= 0
        assert len(reports) == 1 and reports[0].ready


def test_a_model_that_fails_to_load_is_reported(monkeypatch):
    from agent import server

    def broken(cfg):
        raise OSError("model.bin is truncated")

    monkeypatch.setattr(server, "preload", broken)
    reports = []
    with _LoadingApp(server.create_app(AgentConfig(), on_ready=reports.append)) as running:
        deadline = time.monotonic() + 10
        while not reports:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        status, _, body = _get(running.url + "ready")
    assert status == 503 and body == {"ready": False, "error": "OSError: model.bin is truncated"}


@pytest.mark.slow
def test_cadence_demo_says_when_it_is_ready_and_how_long_loading_took():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADENCE_")} | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", "demo", "--port", "0"], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        err = Lines(proc.stderr)
        url = err.wait_for(r"open (http://\S+/) \(Ctrl-C to stop\); loading the models", timeout=60).group(1)
        ready = err.wait_for(r"ready at (http://\S+/) \(models loaded in ([0-9.]+) s, ([0-9.]+) s after start\)",
                             timeout=120)
        assert ready.group(1) == url and 0 < float(ready.group(2)) <= float(ready.group(3))
        status, _, body = _get(url + "ready")
        assert status == 200 and body["load_s"] == pytest.approx(float(ready.group(2)), abs=0.06)
        assert _get(url + "health")[0] == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert "Traceback" not in err.rest()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_cadence_demo_workers_share_the_port_and_take_each_others_tokens(tmp_path):
    """`--workers 2`: both processes answer on the one port, a browser token one made is good at the other, and
    Ctrl-C stops them all."""
    import httpx

    key = "demo-workers-key-0123456789"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADENCE_")} | {"HF_HUB_OFFLINE": "1",
                                                                                   "CADENCE_API_KEYS": key}
    config = tmp_path / "demo.toml"
    config.write_text('fallback_tts = "none"\n')  # no voice to load: the page's API is what is checked
    proc = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", "demo", "--port", "0", "--workers", "2",
                             "--config", str(config)], cwd=REPO, env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    try:
        err = Lines(proc.stderr)
        url = err.wait_for(r"ready at (http://\S+/)", timeout=120).group(1)
        token = httpx.post(url + "api/token", headers={"Authorization": f"Bearer {key}"}).json()["token"]
        seen, deadline = set(), time.monotonic() + 180  # the second listens once its own models are loaded
        while seen != {0, 1} and time.monotonic() < deadline:
            seen.add(httpx.get(url + "health").json()["worker"])  # a new connection each time
        assert seen == {0, 1}
        # Twenty connections, shared out by the kernel: with a secret of each process's own, about half would
        # be refused.
        statuses = [httpx.get(url + "api/config", headers={"Authorization": f"Bearer {token}"}).status_code
                    for _ in range(20)]
        assert statuses == [200] * 20
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in err.rest()
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # no process of the demo listens any more
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_demo_workers_must_be_a_sensible_count():
    import argparse

    from agent import cli

    parser = argparse.ArgumentParser(prog="cadence")
    cli.register(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["demo", "--port", "0", "--workers", "0"])
    with pytest.raises(ValueError, match="--workers must be in 1-64"):
        parsed.func(parsed)


@pytest.mark.parametrize("llm", ["scripted", "openai"])
def test_the_preload_makes_the_first_llm_service_before_any_call(llm):
    """The first LLM service a process makes imports its client library (openai, ~0.5 s): the preload
    pays that before the server listens, not the first call's set-up on the event loop."""
    setting = "" if llm == "scripted" else "llm_base_url='http://127.0.0.1:9/v1', "
    code = ("import sys\n"
            "from agent.pipeline import AgentConfig\n"
            "from agent.server import preload\n"
            "before = 'openai' in sys.modules\n"
            f"preload(AgentConfig({setting}stt_base_url='http://127.0.0.1:9/v1', fallback_tts='none'))\n"
            "print(before, 'openai' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.split()[-2:] == ["False", "True"], out.stderr[-2000:]
