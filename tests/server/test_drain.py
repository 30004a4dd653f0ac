"""SIGTERM / SIGINT drain the real serve() loop: admission stops, /ready says 503, streams in flight finish
within the grace period (or end with `shutting_down`, never as a success), no ERROR is logged, exit 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

SPEECH = "/v1/audio/speech"
BODY = {"voice": "ryan", "language": "english"}
FRAME_BYTES = 1920 * 2


class Served:
    def __init__(self, grace_s: float, frame_s: float, fault: str | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.server.serve_fake", str(grace_s), str(frame_s),
                                      *([fault] if fault else [])],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("port"), line + self.proc.stderr.read()
        self.url = f"http://127.0.0.1:{line.split()[1]}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM) -> tuple[int, str]:
        self.proc.send_signal(sig)
        return self.wait()

    def wait(self) -> tuple[int, str]:
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


def stream_in_background(url: str, text: str) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            with httpx.stream("POST", url + SPEECH, json={**BODY, "input": text}, timeout=60) as r:
                out["status"] = r.status_code
                out["bytes"] = 0
                for chunk in r.iter_raw():
                    out["bytes"] += len(chunk)
                    out.setdefault("first", time.monotonic())
            out["complete"] = True
        except httpx.HTTPError as e:
            out["complete"], out["error"] = False, repr(e)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while "first" not in out and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    return thread, out


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_stream_in_flight_finishes_whole_while_admission_stops(sig):
    served = Served(grace_s=20, frame_s=0.02)
    try:
        text = "Twenty words or so, spoken slowly enough to be in flight when the signal comes."
        thread, out = stream_in_background(served.url, text)
        served.proc.send_signal(sig)
        time.sleep(0.3)
        ready = httpx.get(served.url + "/ready")
        assert ready.status_code == 503 and ready.json() == {"ready": False}
        refused = httpx.post(served.url + SPEECH, json={**BODY, "input": "Hello."})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
        assert "retry-after" in refused.headers
        with connect(served.url.replace("http", "ws") + "/v1/stream", proxy=None) as conn:
            with pytest.raises(ConnectionClosed) as closed:
                conn.recv(timeout=5)
            assert closed.value.rcvd.code == 1012
        thread.join(30)
        frames = 1 + -(-len(text) * 12.5 // 14.5)
        assert out["status"] == 200 and out["complete"] and out["bytes"] == frames * FRAME_BYTES, out
        code, err = served.wait()
    finally:
        served.proc.kill()
    assert code == 0 and "ERROR" not in err and "Traceback" not in err, err


def test_past_the_grace_period_streams_end_with_shutting_down_never_as_complete():
    served = Served(grace_s=0.5, frame_s=0.05)
    try:
        long_text = "A long utterance that runs far beyond the grace period of the drain. " * 4
        thread, out = stream_in_background(served.url, long_text)
        with connect(served.url.replace("http", "ws") + "/v1/stream", proxy=None) as conn:
            conn.send(json.dumps({**BODY, "type": "open", "context_id": "w", "text": long_text, "end": True}))
            messages = [json.loads(conn.recv(timeout=10))]
            code, err = served.stop()
            with pytest.raises(ConnectionClosed):  # 1012 after the context's last messages
                while True:
                    messages.append(json.loads(conn.recv(timeout=10)))
        thread.join(30)
    finally:
        served.proc.kill()
    assert out["status"] == 200 and out["complete"] is False, out  # no terminating chunk
    kinds = [(m["type"], m.get("code"), m.get("reason")) for m in messages if m["type"] in ("error", "done")]
    assert kinds == [("error", "shutting_down", None), ("done", None, "cancelled")], kinds
    assert code == 0 and "ERROR" not in err and "Traceback" not in err, err
    assert "stopping 2 streams" in err


def test_an_engine_fault_mid_step_errors_every_open_stream_and_the_process_exits_non_zero():
    served = Served(grace_s=5, frame_s=0.05, fault="mid-step")
    try:
        with connect(served.url.replace("http", "ws") + "/v1/stream", proxy=None) as conn:
            for cid in ("a", "b", "c"):
                conn.send(json.dumps({**BODY, "type": "open", "context_id": cid, "end": True,
                                      "text": "Long enough to be speaking when the engine fails. " * 3}))
            messages = []
            with pytest.raises(ConnectionClosed):
                while True:
                    messages.append(json.loads(conn.recv(timeout=10)))
                    if messages[-1]["type"] == "done" and messages[-1]["context_id"] == "c":
                        health = httpx.get(served.url + "/health")
        code, err = served.wait()
    finally:
        served.proc.kill()
    for cid in ("a", "b", "c"):
        ends = [(m["type"], m.get("code"), m.get("reason")) for m in messages
                if m.get("context_id") == cid and m["type"] in ("error", "done")]
        assert ends == [("error", "engine_error", None), ("done", None, "error")], (cid, ends)
    assert health.status_code == 503 and health.json() == {"status": "failed", "exiting": True}
    assert code == 1 and "cadence serve: engine failed: injected fault in the engine step" in err, err


def test_out_of_memory_at_warm_up_is_one_clear_line_and_a_non_zero_exit():
    proc = subprocess.run([sys.executable, "-m", "tests.server.serve_fake", "1", "0.01", "oom-warmup"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cadence serve: engine failed to start: CUDA out of memory. Tried to allocate"), last
