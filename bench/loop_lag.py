"""How late an asyncio event loop runs, watched from inside it: a probe sleeps `probe_s` and notes
how late it woke. A benchmark's figures are taken by processes that share the machine with what
they measure; a loop that woke late took its stamps late, and a server whose loop wakes late
serves every connection late."""

from __future__ import annotations

import asyncio
import math
import time

from bench.load.percentiles import distribution

PROBE_S = 0.01


class LoopLag:
    """`lags`: (monotonic ms the probe began, ms it woke late), one per probe while `run` runs."""

    def __init__(self, probe_s: float = PROBE_S):
        self.probe_s = probe_s
        self.lags: list[tuple[float, float]] = []

    async def run(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.probe_s)
            self.lags.append((before * 1e3, (time.monotonic() - before - self.probe_s) * 1e3))

    def start(self) -> asyncio.Task:
        return asyncio.get_running_loop().create_task(self.run())


def lag_summary(lags: list[tuple[float, float]], since_ms: float = -math.inf, until_ms: float = math.inf) -> dict:
    """The distribution (ms) of the lateness of the probes that began in [since_ms, until_ms)."""
    return distribution(lag for at, lag in lags if since_ms <= at < until_ms).as_dict()
