"""The server under soak: started here (`cadence serve` on a checkpoint) or already running, and its
resident memory, GPU memory and log, read while the soak runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

# Log lines that are a server fault: every ERROR / CRITICAL line and every traceback.
FAULT = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback \(most recent call last\)")


class StartedServer:
    """`python -m tts_engine.cli serve` on a free port, its stderr to `log_path`."""

    def __init__(self, checkpoint: Path, device: str, log_path: Path, extra: list[str]):
        self.log_path = log_path
        self._log = log_path.open("w")
        cmd = [sys.executable, "-m", "tts_engine.cli", "serve", "--model", str(checkpoint), "--device", device,
               "--port", "0", "--log-level", "warning", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + 600
        self.url = None
        while self.url is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {log_path.read_text()[-2000:]}")
            match = re.search(r"listening on (http://\S+:\d+)", log_path.read_text())
            self.url = match.group(1) if match else None
            time.sleep(0.1)
        # The server listens before its engine is warm (kernels, graphs: tens of seconds on a GPU); a client
        # that came then would get 503 "not ready" and count against the soak.
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not become ready: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(120)
        finally:
            self._log.close()


def rss_bytes(pid: int | None) -> int | None:
    try:
        return psutil.Process(pid).memory_info().rss if pid is not None else None
    except psutil.Error:
        return None


def gpu_used_mib() -> int | None:
    """GPU memory in use (the first GPU), by nvidia-smi; None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def log_faults(path: Path | None, offset: int = 0) -> list[str]:
    if path is None or not path.exists():
        return []
    lines = path.read_text(errors="replace")[offset:].splitlines()
    return [line for line in lines if FAULT.search(line)]


# The engine's own counters of what stops it (tts_engine/engine/gcpause.py, core.py, watchdog.py): an underrun
# beside a long collection or iteration was the server's stall, not the client's.
ENGINE_COUNTERS = ("gc_pauses", "gc_pause_max_s", "host_iterations", "host_iteration_max_s", "watchdog_stalls")


def engine_counters(url: str, headers: dict) -> dict[str, float] | None:
    """ENGINE_COUNTERS from the server's /metrics (None when it does not answer)."""
    try:
        r = httpx.get(url + "/metrics", headers=headers, timeout=10)
        r.raise_for_status()
    except httpx.HTTPError:
        return None
    found = (re.fullmatch(r"cadence_engine_(\w+) (\S+)", line) for line in r.text.splitlines())
    return {m[1]: float(m[2]) for m in found if m and m[1] in ENGINE_COUNTERS}
