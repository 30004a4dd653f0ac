"""bench/loop_lag.py: a loop held up by blocking work shows as lateness of that length."""

from __future__ import annotations

import asyncio
import time

from bench.loop_lag import LoopLag, lag_summary


def test_a_blocked_loop_shows_as_lag_and_a_free_one_does_not():
    async def main():
        watch = LoopLag(probe_s=0.005)
        task = watch.start()
        await asyncio.sleep(0.2)
        free_until = time.monotonic() * 1e3
        time.sleep(0.15)  # blocking work on the loop's thread
        await asyncio.sleep(0.05)
        task.cancel()
        return watch.lags, free_until

    lags, free_until = asyncio.run(main())
    free = lag_summary(lags, until_ms=free_until - 10)
    assert free["n"] > 10 and free["max"] < 100, free
    held = lag_summary(lags, since_ms=free_until - 10)
    assert 140 <= held["max"] < 1000, held
