"""The agent server and `cadence demo`: the STT wiring (bundled Whisper model, no network), the
demo's configuration, the page and signalling endpoints, and the command's start and clean stop
against a real engine on the tiny checkpoint. Speech is transcribed in test_piper_voice.py and
test_browser_e2e.py (Piper and espeak-ng make real speech); here Whisper is checked for its wiring
only (loaded from the package's local model directory with the Hugging Face hub offline, run on
silence)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from agent.demo import load_config
from agent.pipeline import AgentConfig
from agent.server import MAX_CANDIDATES, _candidates, _offer, describe
from agent.stt import bundled_whisper_model, make_stt

from .helpers import Lines

REPO = Path(__file__).resolve().parents[2]


def test_the_default_stt_is_the_bundled_whisper_tiny_en_loaded_offline(monkeypatch):
    from pipecat.services.whisper.stt import WhisperSTTService

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # any download attempt would fail
    path = Path(bundled_whisper_model())
    assert (path / "model.bin").is_file()
    stt = make_stt(AgentConfig())
    assert isinstance(stt, WhisperSTTService)
    assert stt._settings.model == str(path)
    segments, info = stt._model.transcribe(np.zeros(16000, dtype=np.float32), language="en")
    assert info.duration == pytest.approx(1.0)
    list(segments)  # runs the model; silence may or may not yield a segment


def test_an_openai_compatible_stt_by_configuration():
    from pipecat.services.openai.stt import OpenAISTTService

    stt = make_stt(AgentConfig(stt_base_url="http://127.0.0.1:9/v1", stt_model="whisper-large-v3"))
    assert isinstance(stt, OpenAISTTService)
    assert stt._settings.model == "whisper-large-v3"
    assert "OpenAI-compatible STT at http://127.0.0.1:9/v1" in describe(
        AgentConfig(stt_base_url="http://127.0.0.1:9/v1"))["stt"]


def test_demo_config_defaults_file_environment_flags(tmp_path):
    cfg = load_config(None, {})
    assert not cfg.has_engine and cfg.llm_base_url is None and cfg.stt_base_url is None
    assert describe(cfg) == {"stt": "local Whisper, incremental (bundled tiny.en, cpu)",
                             "llm": "OFFLINE SCRIPTED LLM (not a language model)",
                             "tts": "Piper fallback voice (en_US-joe-medium, CPU): no Cadence engine configured"}
    cfg = load_config(None, {"CADENCE_FALLBACK_TTS": "none", "CADENCE_MIN_INTERRUPTION_S": "0.7"})
    assert not cfg.has_tts and cfg.min_interruption_s == 0.7
    assert describe(cfg)["tts"] == "no TTS engine configured: replies are text only"
    f = tmp_path / "agent.toml"
    f.write_text('llm_base_url = "http://llm:8000/v1"\nscripted_tokens_per_s = 40\nvoice = "serena"\n')
    cfg = load_config(f, {"CADENCE_URL": "ws://env/v1/stream", "CADENCE_VOICE": "aiden",
                          "CADENCE_VAD_STOP_S": "0.3"})
    assert (cfg.llm_base_url, cfg.scripted_tokens_per_s, cfg.voice, cfg.vad_stop_s) == (
        "http://llm:8000/v1", 40.0, "aiden", 0.3)
    assert cfg.cadence_url == "ws://env/v1/stream"
    assert load_config(f, {"CADENCE_URL": "ws://env"}, cadence_url="ws://flag").cadence_url == "ws://flag"
    f.write_text('no_such_setting = 1\n')
    with pytest.raises(ValueError, match="unknown setting 'no_such_setting'"):
        load_config(f, {})
    with pytest.raises(ValueError, match="vad_stop_s must be a number"):
        load_config(None, {"CADENCE_VAD_STOP_S": "fast"})
    with pytest.raises(ValueError, match="vad_stop_s must be in"):
        load_config(None, {"CADENCE_VAD_STOP_S": "9"})


def test_malformed_offers_are_rejected():
    from fastapi import HTTPException

    for body in ([], {"sdp": "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111", "type": "answer"},
                 {"sdp": "hello", "type": "offer"}, {"type": "offer"},
                 {"sdp": "v=0\r\nm=audio 9", "type": "offer", "pc_id": 5}):
        with pytest.raises(HTTPException) as e:
            _offer(body)
        assert e.value.status_code == 422


def test_malformed_candidates_are_rejected():
    from fastapi import HTTPException

    good = {"candidate": "candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host", "sdp_mid": "0",
            "sdp_mline_index": 0}
    assert _candidates({"pc_id": "p", "candidates": [good, {**good, "candidate": ""}]})[0] == "p"
    for body in ({"pc_id": [], "candidates": []}, {"pc_id": {}, "candidates": []}, {"pc_id": "p"},
                 {"pc_id": "p", "candidates": [{**good, "candidate": "garbage"}]},
                 {"pc_id": "p", "candidates": [{**good, "candidate": "candidate:1 1 udp x 1.2.3.4 5 typ host"}]},
                 {"pc_id": "p", "candidates": [{**good, "candidate": 12345}]},
                 {"pc_id": "p", "candidates": [{**good, "sdp_mid": None, "sdp_mline_index": None}]},
                 {"pc_id": "p", "candidates": [{**good, "sdp_mline_index": "x"}]},
                 {"pc_id": "p", "candidates": [good] * (MAX_CANDIDATES + 1)}):
        with pytest.raises(HTTPException) as e:
            _candidates(body)
        assert e.value.status_code == 422, body


def _post(url: str, body: bytes, content_type: str | None = "application/json", method: str = "POST") -> int:
    headers = {"Content-Type": content_type} if content_type else {}
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_signalling_refuses_what_it_cannot_take_with_a_4xx_over_a_socket(monkeypatch):
    """Each of these was a 500, a 400 for any reason, or a body read whole into memory (a reliability
    probe): wrong media type 415, over the body limit 413, unparsable or ill-formed 422, an unknown
    session 404; the server serves the next request as before."""
    from agent.server import MAX_BODY_BYTES, create_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with _AppThread(create_app(AgentConfig())) as app:
        offer = app.url + "api/offer"
        assert _post(offer, b'{"sdp": "v=0", "type": "offer"}', content_type="text/plain") == 415
        assert _post(offer, b'{"sdp": "v=0", "type": "offer"}', content_type=None) == 415
        assert _post(offer, b'{"sdp": "' + b"v" * MAX_BODY_BYTES + b'"}') == 413
        assert _post(offer, b"not json") == 422
        assert _post(offer, b'{"sdp": "v=0\\r\\nm=audio nonsense", "type": "offer"}') == 422
        assert _post(offer, b'{"pc_id": [], "candidates": []}', method="PATCH") == 422
        assert _post(offer, b'{"pc_id": "nobody", "candidates": []}', method="PATCH") == 404
        with urllib.request.urlopen(app.url + "api/config", timeout=10) as r:
            assert r.status == 200


@pytest.mark.slow
def test_cadence_demo_serves_the_page_and_stops_cleanly_on_ctrl_c(tiny_checkpoint):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CADENCE_")}
    env["HF_HUB_OFFLINE"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", "demo", "--port", "0",
                             "--model", str(tiny_checkpoint)],
                            cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        err = Lines(proc.stderr)
        url = err.wait_for(r"open (http://\S+/)", timeout=90).group(1)
        err.wait_for(r"cadence demo: ready at ", timeout=90)  # offers are 503s until the models are in
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200
            assert r.headers["content-type"].startswith("text/html")
            page = r.read().decode()
        assert "<title>Cadence voice agent</title>" in page and "/api/offer" in page
        with urllib.request.urlopen(url + "api/config", timeout=10) as r:
            config = json.load(r)
        assert config["llm"] == "OFFLINE SCRIPTED LLM (not a language model)"
        assert config["tts"].startswith("Cadence engine at ws://127.0.0.1:")
        assert _post(url + "api/offer", b'{"sdp": "hello", "type": "offer"}') == 422
        assert _post(url + "api/offer", b"not json") == 422
        assert _post(url + "api/offer", b'{"sdp": "v=0\\r\\nm=audio nonsense", "type": "offer"}') == 422

        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        stopped_in = time.monotonic() - t0
        log = err.rest()
        assert "cadence demo: stopped" in log and "cadence serve: stopped" in log, log
        assert "Traceback" not in log, log
        assert stopped_in < 10, stopped_in
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class _AppThread:
    """The agent server's app under uvicorn on a loopback port, on a thread of its own."""

    def __init__(self, app):
        import socket

        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the agent server did not start"
            time.sleep(0.05)
        deadline = time.monotonic() + 120  # the models load after the server starts listening
        while _get(self.url + "ready") != 200:
            assert time.monotonic() < deadline, "the agent server's models did not load"
            time.sleep(0.1)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()
        assert not self.thread.is_alive(), "the agent server did not stop"


async def _browser_like_session(url: str) -> tuple[list[dict], float]:
    """What the page does, with aiortc: microphone track (silence), data channel, offer, answer;
    returns the events received and the seconds of bot audio received in about a second."""
    import asyncio

    from aiortc import RTCPeerConnection, RTCSessionDescription
    from aiortc.mediastreams import AudioStreamTrack

    pc = RTCPeerConnection()
    try:
        pc.addTrack(AudioStreamTrack())
        events: asyncio.Queue[dict] = asyncio.Queue()
        channel = pc.createDataChannel("events")
        channel.on("message", lambda m: m.startswith("ping") or events.put_nowait(json.loads(m)))
        tracks = []
        pc.on("track", tracks.append)
        await pc.setLocalDescription(await pc.createOffer())  # aiortc gathers its candidates here
        body = json.dumps({"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}).encode()

        def post():
            req = urllib.request.Request(url + "api/offer", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=20) as r:
                return json.load(r)

        answer = await asyncio.to_thread(post)
        assert answer["type"] == "answer" and answer["pc_id"]
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type=answer["type"]))
        received = [await asyncio.wait_for(events.get(), timeout=30)]  # audio only: no renegotiation asked
        audio = next(t for t in tracks if t.kind == "audio")
        seconds = 0.0
        while seconds < 1.0:
            frame = await asyncio.wait_for(audio.recv(), timeout=10)
            seconds += frame.samples / frame.sample_rate
        return received, seconds
    finally:
        await pc.close()


@pytest.mark.slow
def test_a_browser_like_webrtc_session_gets_its_pipeline_events_and_audio(cadence_server, monkeypatch):
    """A real SmallWebRTC session against the app: the answer, the `config` event on the page's
    data channel (sent once the pipeline is up), and the bot's audio track playing (silence until
    someone speaks); hanging up and stopping the server end the session. The session's VAD model
    loads in a thread, not on the event loop the other sessions share."""
    import asyncio

    from agent.server import create_app

    from .helpers import vads_made_on_the_loop

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    on_loop = vads_made_on_the_loop(monkeypatch)
    cfg = AgentConfig(cadence_url=cadence_server.ws_url)
    with _AppThread(create_app(cfg)) as app:
        events, seconds = asyncio.run(asyncio.wait_for(_browser_like_session(app.url), timeout=60))
    assert events == [{"type": "config", **describe(cfg)}]
    assert seconds >= 1.0
    assert on_loop == [False]


def _turn(cfg: AgentConfig, tts, reply: str) -> tuple[list[dict], object]:
    """One user turn through the pipeline under pipecat's harness, with the page's event observer."""
    from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregator
    from pipecat.processors.filters.identity_filter import IdentityFilter
    from pipecat.tests.utils import SleepFrame, run_test

    from agent.pipeline import build_pipeline
    from agent.scripted_llm import ScriptedLLM
    from agent.server import UiEvents

    from .helpers import PacedOutputTransport, run
    from .test_pipeline import user_says

    llm = ScriptedLLM(replies=[reply], tokens_per_s=40, first_token_s=0.05)
    source, output = IdentityFilter(), PacedOutputTransport()
    pipeline, context = build_pipeline(cfg, input=source, output=output, stt=None, llm=llm, tts=tts, vad=False)
    sent: list[dict] = []
    aggregator = next(p for p in pipeline.processors if isinstance(p, LLMUserAggregator))
    ui = UiEvents(sent.append, stt=source, llm=llm, output=output, text_only=tts is None, user_aggregator=aggregator)
    run(run_test(pipeline, frames_to_send=[*user_says("What is the weather like?"), SleepFrame(sleep=3.0)],
                 observers=[ui]))
    return sent, context


def test_the_page_events_of_a_spoken_turn(cadence_server):
    from agent.cadence_tts import CadenceStreamOptions, CadenceTTSService

    reply = "Sure, it is sunny today."
    cfg = AgentConfig(cadence_url=cadence_server.ws_url, user_speech_timeout_s=0.2)
    sent, _ = _turn(cfg, CadenceTTSService(url=cadence_server.ws_url, options=CadenceStreamOptions(seed=5)), reply)
    types = [e["type"] for e in sent]
    assert {"type": "user", "text": "What is the weather like?"} in sent
    assert types.count("bot_turn") == 1 and types.count("bot_started") == 1
    assert types.index("user_stopped") < types.index("bot_turn") < types.index("bot_started")
    assert [e["text"] for e in sent if e["type"] == "bot"] == reply.split()  # the words played, one by one
    cadence_server.wait_empty()


def test_with_no_tts_the_agent_answers_in_text():
    reply = "Sure, it is sunny today."
    cfg = AgentConfig(cadence_url=None).validate(require_tts=False)
    sent, context = _turn(cfg, None, reply)
    assert "".join(e["text"] for e in sent if e["type"] == "bot") == reply
    assert all(e.get("token") for e in sent if e["type"] == "bot")
    assert [m["content"] for m in context.get_messages() if m.get("role") == "assistant"] == [reply]


def _sockets() -> int:
    """Sockets this process holds (the server runs on a thread of it)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


@pytest.mark.slow
def test_an_abandoned_offer_frees_its_sockets_and_sessions_past_the_cap_get_503(monkeypatch):
    """A client that goes away after its offer: its connect timeout closes the session and every
    socket of it (pipecat's close was cut off by its own timeout task, leaking a UDP socket pair a
    time); meanwhile a second offer past the cap of one session is a 503, and is taken once the
    first is gone."""
    import asyncio

    from aiortc import RTCPeerConnection
    from aiortc.mediastreams import AudioStreamTrack

    from agent.server import create_app

    async def abandoned_offer() -> bytes:
        pc = RTCPeerConnection()
        pc.addTrack(AudioStreamTrack())
        pc.createDataChannel("events")
        await pc.setLocalDescription(await pc.createOffer())
        body = json.dumps({"sdp": pc.localDescription.sdp, "type": "offer"}).encode()
        await pc.close()
        return body

    def wait_until(cond, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with _AppThread(create_app(AgentConfig(), max_sessions=1, connect_timeout_s=3.0)) as app:
        offer = app.url + "api/offer"
        first, second = asyncio.run(abandoned_offer()), asyncio.run(abandoned_offer())
        idle = _sockets()
        assert _post(offer, first) == 200
        assert _sockets() > idle  # the session's ICE sockets
        assert _post(offer, second) == 503
        wait_until(lambda: _sockets() <= idle, 30, "the abandoned session's sockets were not freed")
        wait_until(lambda: _post(offer, second) == 200, 30, "the cap was not freed")
        wait_until(lambda: _sockets() <= idle, 30, "the second abandoned session's sockets were not freed")
