"""The router's added latency: first audio through `cadence cluster` (Serve's proxy, the headroom
router, one replica) against a plain `cadence serve` on the same checkpoint and device, one after the
other, each measured alone with sequential requests (so the difference is the path, not load).

    python -m tts_engine.cluster.latency --model DIR [--device cuda] [--requests 50]

Prints p50/p95 of time to first audio byte (HTTP, raw PCM) and first audio event (WebSocket) on each
path, and their differences.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

from websockets.sync.client import connect

TEXT = "Hello there, this is a short sentence."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("server not ready in time")


def http_first_byte(port: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"input": TEXT, "voice": "ryan", "language": "english", "response_format": "pcm"})
    t = time.perf_counter()
    conn.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:200]!r}")
    r.read(1)
    first = time.perf_counter() - t
    r.read()
    conn.close()
    return first


def ws_first_audio(conn, i: int) -> float:
    t = time.perf_counter()
    conn.send(json.dumps({"type": "open", "context_id": str(i), "voice": "ryan", "language": "english",
                          "text": TEXT, "end": True}))
    first = None
    while True:
        m = json.loads(conn.recv(timeout=60))
        if m["type"] == "audio" and first is None:
            first = time.perf_counter() - t
        elif m["type"] in ("done", "error"):
            if m["type"] == "error" or first is None:
                raise SystemExit(f"stream failed: {m}")
            return first


def measure(port: int, n: int) -> dict[str, list[float]]:
    for _ in range(3):  # warm-up
        http_first_byte(port)
    out = {"http": [http_first_byte(port) for _ in range(n)]}
    with connect(f"ws://127.0.0.1:{port}/v1/stream", proxy=None, open_timeout=30) as conn:
        out["ws"] = [ws_first_audio(conn, i) for i in range(n)]
    return out


def run_server(argv: list[str], n: int) -> dict[str, list[float]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", *argv, "--port", str(port)],
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_ready(port, proc)
        return measure(port, n)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--requests", type=int, default=50)
    args = p.parse_args(argv)
    common = ["--model", args.model, "--device", args.device]
    direct = run_server(["serve", *common], args.requests)
    routed = run_server(["cluster", *common, "--replicas", "1"], args.requests)
    for kind in ("http", "ws"):
        d50, d95, r50, r95 = pct(direct[kind], 50), pct(direct[kind], 95), pct(routed[kind], 50), pct(routed[kind], 95)
        print(f"{kind:4s} first audio ms  direct p50 {d50:7.2f} p95 {d95:7.2f} | router p50 {r50:7.2f} p95 {r95:7.2f}"
              f" | added p50 {r50 - d50:+7.2f} p95 {r95 - d95:+7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
