"""A fresh `cadence serve` process per trial (the reference method's "fresh server per trial").

The server picks a free port (`--port 0`) and announces it on stderr ("listening on URL"); a thread
drains all of stderr (a full pipe would block the server), keeps its tail for errors and finds that
line, whatever warnings come before it.
"""

from __future__ import annotations

import collections
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

_LISTENING = re.compile(r"listening on (http://\S+?:\d+)")
# Every simulated client of the benchmark comes from one address: the server's per-client fair share
# (tts_engine/server/quota.py) would refuse it past a share of the slots, so its own server lifts it.
BENCH_SERVER_TOML = "[server]\nmax_streams_per_client = 100000\nmax_ws_connections_per_client = 100000\n"


def bench_config() -> Path:
    """A settings file for the benchmark's own server (`cadence serve --config`)."""
    path = Path(tempfile.gettempdir()) / "cadence-bench-serve.toml"
    path.write_text(BENCH_SERVER_TOML)
    return path


class ServerProcess:
    def __init__(self, model: Path, *, device: str = "cpu", extra_args: tuple[str, ...] = (),
                 ready_timeout_s: float = 900.0, env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = None):
        """env: the server's environment (None: this process's); on_line: called with each stderr line as it
        arrives (bench/startup.py times the start-up phases by them)."""
        self.cmd = [sys.executable, "-m", "tts_engine.cli", "serve", "--model", str(model), "--port", "0",
                    "--device", device, "--log-level", "warning", *extra_args]
        if "--config" not in extra_args:
            self.cmd += ["--config", str(bench_config())]
        self.ready_timeout_s = ready_timeout_s
        self.env, self.on_line = env, on_line
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self._drainer: threading.Thread | None = None

    def _fail(self, why: str) -> RuntimeError:
        self.stop()
        if self._drainer is not None:
            self._drainer.join(timeout=5)  # the pipe closes with the process: the tail is complete
        return RuntimeError(f"cadence serve {why}; last stderr lines:\n" + "".join(self.tail))

    def start(self) -> ServerProcess:
        self.proc = subprocess.Popen(self.cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env=self.env)
        self._listening = threading.Event()
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + self.ready_timeout_s
        while not self._listening.wait(0.1):
            if self.proc.poll() is not None:
                raise self._fail(f"exited with status {self.proc.returncode} before listening")
            if time.monotonic() > deadline:
                raise self._fail(f"did not listen within {self.ready_timeout_s:g} s")
        while True:
            if self.proc.poll() is not None:
                raise self._fail(f"exited with status {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/ready", timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise self._fail(f"was not ready within {self.ready_timeout_s:g} s")
            time.sleep(0.1)

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.tail.append(line)
            if self.on_line is not None:
                self.on_line(line)
            match = None if self._listening.is_set() else _LISTENING.search(line)
            if match:
                self.url = match.group(1)
                self._listening.set()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)  # graceful: open streams cancelled, engine stopped
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
