"""`run_voice_bench`: start `cadence demo` (or use a running agent), put the questions through a
client, write the report. `python -m bench.voice` is its command line."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from . import report
from .turns import questions

REPO = Path(__file__).resolve().parents[2]
CLIENTS = ("browser", "aiortc")


@contextlib.contextmanager
def demo_process(args: list[str], *, timeout_s: float = 300) -> Iterator[str]:
    """`cadence demo --port 0 ARGS` as a child; yields its URL once it says it is ready."""
    cmd = [sys.executable, "-m", "tts_engine.cli", "demo", "--port", "0", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def pump():
        for line in proc.stderr:
            lines.append(line)
            if m := re.search(r"cadence demo: ready at (http://\S+/)", line):
                url.append(m.group(1))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not found.wait(timeout_s) or not url:
            raise RuntimeError("cadence demo did not become ready:\n" + "".join(lines[-40:]))
        yield url[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_voice_bench(*, client: str = "browser", turns: int = 10, url: str | None = None,
                    demo_args: tuple[str, ...] = (), out: Path = Path("voice-bench")) -> dict:
    """N turns through `client` against the agent at `url` (None: a `cadence demo` started here
    with `demo_args`); writes voice-bench.json and voice-bench.png into `out`; returns the report."""
    if client not in CLIENTS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}, got {client!r}")
    texts = questions(turns)
    if client == "browser":
        from .browser import require_browser
        from .browser import run_browser as drive
        require_browser()
    else:
        from .client import run_aiortc as drive
    with contextlib.ExitStack() as stack:
        target = url or stack.enter_context(demo_process(list(demo_args)))
        began = time.time()
        records, extra = drive(target, texts)
    meta = {"client": "headless Chromium" if client == "browser" else "aiortc client",
            "url": url or "cadence demo " + " ".join(demo_args), "started_unix": round(began),
            "cpu_count": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2), **extra}
    result = report.summarise(records, meta)
    report.write(result, out)
    return result
