"""A benchmark's helper process (an agent, a demo): started, read until it says it is ready, stopped."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def child_process(cmd: list[str], ready: str, *, what: str, timeout_s: float, cwd=None,
                  env: dict[str, str] | None = None) -> Iterator[tuple[re.Match, list[str]]]:
    """`cmd` as a child whose stderr a thread reads (its last 200 lines kept, so a full pipe never
    blocks it); yields the first match of the regex `ready` in that stderr and the lines, once it has
    appeared. Stopped on exit with SIGINT, then killed if it has not ended within 20 s."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    pattern = re.compile(ready)
    lines: list[str] = []
    found: list[re.Match] = []
    done = threading.Event()

    def pump():
        for line in proc.stderr:
            lines.append(line)
            del lines[:-200]
            if not found and (m := pattern.search(line)):
                found.append(m)
                done.set()
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not done.wait(timeout_s) or not found or proc.poll() is not None:
            raise RuntimeError(f"{what} did not become ready:\n" + "".join(lines[-40:]))
        yield found[0], lines
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
