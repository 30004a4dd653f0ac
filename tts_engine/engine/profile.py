"""cProfile of the engine thread under load, for finding where its host time goes
(`cadence serve --profile-engine PATH`). No torch.

The window opens at the first busy iteration after warm-up and closes `seconds` later (or when the
engine stops); the stats are then written to PATH for `python -m pstats PATH` or snakeviz. cProfile
slows Python-heavy code, so a profiled run's latencies are not measurements; the per-part host time
in /metrics (`cadence_engine_host_*_s`) is the cheap, always-on view.
"""

from __future__ import annotations

import cProfile
import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)


class EngineProfile:
    def __init__(self, path: str | Path, seconds: float):
        if not seconds > 0:
            raise ValueError(f"profile seconds must be > 0, got {seconds}")
        self.path, self.seconds = Path(path), seconds
        self._profile: cProfile.Profile | None = None
        self._started: float | None = None
        self.done = False

    def tick(self, busy: bool) -> None:
        """After every engine iteration, on the engine thread (cProfile profiles the calling thread)."""
        if self.done:
            return
        if self._profile is None:
            if busy:
                self._profile = cProfile.Profile()
                self._started = time.monotonic()
                self._profile.enable()
            return
        if time.monotonic() - self._started >= self.seconds:
            self.close()

    def close(self) -> None:
        """Stop and write the stats (engine thread); a window that never opened writes nothing."""
        if self.done or self._profile is None:
            self.done = True
            return
        self._profile.disable()
        self._profile.dump_stats(str(self.path))
        self.done = True
        log.info("engine profile: %.1f s written to %s", time.monotonic() - self._started, self.path)
