"""Shared pieces of the phone tests: the spoken question (espeak-ng), G.711 at 8 kHz, Whisper
transcription of what the caller heard, and the phone server on a real loopback port (uvicorn in
a thread, as `cadence phone` runs it)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest
import uvicorn

QUESTION = "What is the capital of France?"
LINE_RATE = 8000
CHUNK_S = 0.02  # carriers and SIP phones send 20 ms of audio a packet


def words(text: str) -> list[str]:
    return "".join(c for c in text.lower() if c.isalpha() or c.isspace()).split()


def answers_the_question(said: list[str]) -> bool:
    """The scripted LLM's answer to QUESTION: "You said: <what the bot heard> This is the offline
    scripted reply, not a language model ...". Whisper tiny.en hears 8 kHz espeak-ng speech
    imperfectly (twice: the bot's STT, then the test's; worse on a loaded CI machine), so some of
    the echo ("said", "capital", "France") and some of the scripted sentence must come back."""
    heard = set(said)
    return bool({"said", "capital", "france"} & heard) and bool({"offline", "scripted", "reply", "language"} & heard)


def spoken(text: str, tmp: Path, rate: int = LINE_RATE) -> bytes:
    """`text` spoken by espeak-ng, as 16-bit mono PCM at `rate`."""
    import soxr

    if shutil.which("espeak-ng") is None:
        pytest.fail("the phone tests need espeak-ng (apt-get install -y espeak-ng)")
    path = tmp / f"said-{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, timeout=30)
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
        source_rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    return (np.clip(soxr.resample(samples, source_rate, rate), -1, 1) * 32767).astype("<i2").tobytes()


def transcribe(pcm16: bytes, rate: int = LINE_RATE) -> str:
    import soxr

    from agent.stt import bundled_whisper_model, load_whisper

    samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768
    model = load_whisper(bundled_whisper_model(), "cpu", "int8")
    segments, _ = model.transcribe(soxr.resample(samples, rate, 16000), language="en", beam_size=1)
    return " ".join(s.text for s in segments)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppThread:
    """A FastAPI app served by uvicorn on a loopback port, in a thread with its own event loop."""

    def __init__(self, app, port: int | None = None):
        self.port = port or free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, lifespan="on",
                                                    log_level="warning"))
        self.server.install_signal_handlers = lambda: None
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> AppThread:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the phone server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the phone server did not stop"


def open_sockets() -> int:
    """Sockets this process holds (its file descriptors that are sockets)."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            count += str(fd.readlink()).startswith("socket:")
    return count


def webhook_stream_url(base: str, carrier: str, *, data: bytes = b"CallSid=CA1", headers: dict | None = None) -> str:
    """What a carrier does first: POST its call webhook; the stream URL the answer names."""
    import re
    import urllib.request
    from xml.sax.saxutils import unescape

    request = urllib.request.Request(f"{base}/{carrier}", data=data, method="POST", headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as r:
        body = r.read().decode()
    if carrier == "exotel":  # its Voicebot applet's dynamic URL: JSON
        import json

        return json.loads(body)["url"]
    found = re.search(r'<Stream url="([^"]+)"|<Stream [^>]*>([^<]+)</Stream>', body)
    assert found, body
    return unescape(found.group(1) or found.group(2))
