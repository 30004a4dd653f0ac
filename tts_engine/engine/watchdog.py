"""Watchdog: a thread that reports an engine loop which stopped making progress while work is
pending (SGLang's step-counter watchdog). It reports, it does not kill: `stalled` turns /health
and /ready to 503 and shows in /metrics, and the first report of each stall logs the loop's state
and the engine thread's stack. No torch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Watchdog:
    def __init__(self, progress: Callable[[], int], busy: Callable[[], bool], stall_s: float, *,
                 on_stall: Callable[[float], None] | None = None, poll_s: float | None = None):
        """progress: a counter the loop advances every iteration; busy: work is pending."""
        self.progress, self.busy = progress, busy
        self.stall_s = stall_s
        self.poll_s = poll_s if poll_s is not None else min(1.0, stall_s / 4)
        self.on_stall = on_stall
        self.stalled = False
        self.stalls = 0  # stalls reported so far
        self._last = progress()
        self._since = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cadence-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def stalled_for_s(self, now: float | None = None) -> float:
        """Seconds without progress (0 while the loop moves)."""
        return max(0.0, (time.monotonic() if now is None else now) - self._since) if self.stalled else 0.0

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.check()

    def check(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        current = self.progress()
        if current != self._last or not self.busy():
            if self.stalled:
                log.warning("engine loop moves again after %.1f s", now - self._since)
            self._last, self._since, self.stalled = current, now, False
            return False
        if now - self._since >= self.stall_s and not self.stalled:
            self.stalled = True
            self.stalls += 1
            log.error("engine loop stalled: no progress for %.1f s with work pending", now - self._since)
            if self.on_stall is not None:
                try:
                    self.on_stall(now - self._since)
                except Exception:
                    log.exception("watchdog stall report failed")
        return self.stalled
