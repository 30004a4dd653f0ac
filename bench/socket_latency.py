"""Request-to-first-PCM over a real socket against `cadence serve` (issue 3's socket figure; the
`bench.stages` CLI runs it): a server started in a subprocess, or one already listening; per
sequential request, from just before the request is written to the arrival of the first PCM byte of
the response body, with the engine's own first-audio breakdown read from /metrics before and after.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ttfa_sums(port: int) -> dict[str, float]:
    """The server's TTFA sums and counts from /metrics: the engine's breakdown (opened -> drained ->
    prefill launched -> first chunk launched -> audio read; drained -> prefill issued, through queued for
    a slot and the launch's start) and the HTTP handler's whole TTFA."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        text = b"".join(iter(lambda: s.recv(65536), b"")).decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("cadence_engine_ttfa_") or name.startswith("cadence_time_to_first_audio_seconds_sum") \
                or name.startswith("cadence_time_to_first_audio_seconds_count"):
            out[name.split("{")[0]] = float(value)
    return out


def _ttfa_breakdown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean ms per request of each part between two /metrics reads."""
    from tts_engine.engine.entry import ISSUE_PARTS, TTFA_PARTS

    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    n = d.get("cadence_engine_ttfa_count", 0.0)
    out = {}
    if n:
        for part in TTFA_PARTS:
            out[f"engine_{part}_ms"] = d.get(f"cadence_engine_ttfa_{part}_sum_s", 0.0) / n * 1e3
        out["engine_total_ms"] = sum(out.values())
        # inside "plan": the open's drain until its prefill is on the device's queue, and its parts
        for part in ("issue", *ISSUE_PARTS):
            out[f"engine_{part}_ms"] = d.get(f"cadence_engine_ttfa_{part}_sum_s", 0.0) / n * 1e3
    m = d.get("cadence_time_to_first_audio_seconds_count", 0.0)
    if m:
        out["http_handler_ttfa_ms"] = d["cadence_time_to_first_audio_seconds_sum"] / m * 1e3
    return out


def wait_ready(port: int, timeout_s: float = 300.0, check: Callable[[], None] | None = None) -> None:
    """Until GET /ready on 127.0.0.1:port answers 200; check(), if given, raises when waiting is futile."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check is not None:
            check()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(f"GET /ready HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not ready after {timeout_s:.0f} s")
        time.sleep(0.3)


def socket_first_pcm(model_dir: Path, requests: int, texts: list[str], serve_args: tuple[str, ...] = ()) -> dict:
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "tts_engine.cli", "serve", "--model", str(model_dir),
                               "--device", "cuda", "--port", str(port), "--log-level", "warning", *serve_args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    def still_running() -> None:
        if server.poll() is not None:
            raise RuntimeError(f"server exited: {server.stderr.read()[-2000:]}")

    try:
        wait_ready(port, check=still_running)
        return {**socket_requests(port, requests, texts), "serve_args": list(serve_args)}
    finally:
        server.terminate()
        server.wait(30)


def socket_requests(port: int, requests: int, texts: list[str], times: list | None = None, *, voice: str = "ryan",
                    warmup: int = 5) -> dict:
    """`requests` sequential POSTs (after `warmup` ones) to the server on 127.0.0.1:port in `voice`, each read to
    its end over a raw socket: request sent -> first PCM byte, percentiles, and the engine's breakdown.
    times: if given, each measured request's (sent, first PCM byte) `time.perf_counter` pair is appended."""
    first_pcm, totals = [], []
    sums = {}
    for i in range(requests + warmup):
        if i == warmup:
            sums = _ttfa_sums(port)
        body = json.dumps({"model": "qwen3-tts", "input": texts[i % len(texts)], "voice": voice,
                           "language": "english", "response_format": "pcm", "seed": i}).encode()
        head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            t0 = time.perf_counter()
            s.sendall(head + body)
            buf, t_first = b"", None
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if t_first is None and b"\r\n\r\n" in buf:
                    rest = buf.split(b"\r\n\r\n", 1)[1]
                    # chunked transfer: the first chunk-size line then PCM bytes
                    if b"\r\n" in rest and len(rest.split(b"\r\n", 1)[1]) > 0:
                        t_first = time.perf_counter()
            total = time.perf_counter() - t0
        if t_first is None or not buf.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"request {i}: no PCM in the response: {buf[:300]!r}")
        if i >= warmup:  # the first requests warm the allocator and the HTTP stack
            first_pcm.append((t_first - t0) * 1e3)
            if times is not None:
                times.append((t0, t_first))
            totals.append(total * 1e3)
    first_pcm.sort()

    def pct(p: float) -> float:
        return first_pcm[max(0, int(-(-p * len(first_pcm) // 100)) - 1)]

    return {"requests": len(first_pcm), "first_pcm_ms_p50": pct(50),
            "first_pcm_ms_p95": pct(95), "first_pcm_ms_max": first_pcm[-1],
            "first_pcm_ms_mean": statistics.fmean(first_pcm), "total_ms_p50": statistics.median(totals),
            "breakdown_mean": _ttfa_breakdown(sums, _ttfa_sums(port))}


def corpus() -> list[str]:
    corpus = (Path(__file__).resolve().parents[1] / "tts_engine" / "data" / "harvard-sentences.txt")
    return [line.strip() for line in corpus.read_text().splitlines() if line.strip()]
