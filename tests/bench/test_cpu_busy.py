"""bench/cpu_busy.py: the machine's CPU use over a stretch of time, from /proc/stat."""

from __future__ import annotations

import multiprocessing
import os
import time

from bench.cpu_busy import CpuBusy


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_every_core_spinning_shows_as_a_busy_machine():
    cores = os.cpu_count() or 1
    with CpuBusy(interval_s=0.5) as cpu:
        procs = [multiprocessing.get_context("spawn").Process(target=_spin, args=(2.0,)) for _ in range(cores)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    got = cpu.summary()
    assert got is not None and got["cores"] == cores
    assert 0 < got["mean"] <= got["peak"] <= 1
    assert got["peak"] >= 0.8, got  # a half-second interval with every core spinning


def test_a_quiet_stretch_is_not_a_busy_one():
    with CpuBusy(interval_s=0.2) as cpu:
        time.sleep(1.0)
    got = cpu.summary()
    assert got is not None and got["mean"] < 0.9, got  # sleeping: whatever else runs, not all cores spinning
