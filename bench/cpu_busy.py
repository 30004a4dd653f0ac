"""The whole machine's CPU use while a benchmark round runs (Linux /proc/stat, all cores).

When the callers, the agents and the engine share one machine, a round can be limited by the
machine's cores rather than by anything it measures: its figures then say so (the mean, and the
busiest second, as a fraction of all cores)."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

STAT = Path("/proc/stat")


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies since boot over all cores; None where /proc/stat is missing."""
    try:
        fields = [int(x) for x in STAT.read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user and nice
    return total - idle, total


def _busy(a: tuple[int, int], b: tuple[int, int]) -> float:
    return (b[0] - a[0]) / (b[1] - a[1]) if b[1] > a[1] else 0.0


class CpuBusy:
    """`with CpuBusy() as cpu: ...`, then `cpu.summary()`: {"mean", "peak" (the busiest interval), "cores"}, or None."""

    def __init__(self, interval_s: float = 1.0):
        self._interval = interval_s
        self._stop = threading.Event()
        self._samples: list[tuple[int, int]] = []
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-busy")

    def _run(self) -> None:
        while True:
            times = cpu_times()
            if times is not None:
                self._samples.append(times)
            if self._stop.wait(self._interval):
                break

    def __enter__(self) -> CpuBusy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if (times := cpu_times()) is not None:
            self._samples.append(times)

    def summary(self) -> dict | None:
        s = self._samples
        if len(s) < 2:
            return None
        return {"mean": round(_busy(s[0], s[-1]), 3),
                "peak": round(max(_busy(a, b) for a, b in itertools.pairwise(s)), 3), "cores": os.cpu_count()}
