"""Graceful shutdown: on SIGINT/SIGTERM the server drains instead of cutting streams off.

`Drain.run(grace_s)`: admission stops at once (new requests and contexts get 503 / an error event
`shutting_down`, `/ready` says 503 so a balancer stops sending), the streams in flight run on for up
to `grace_s`, and any still running then are stopped with a `shutting_down` error (a raw audio
response ends without its last chunk, so it never reads as complete). Only then does uvicorn close
the listener and the connections; the process exits 0 (server/run.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from .errors import ApiError

log = logging.getLogger(__name__)


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self._held: dict[object, Callable[[], None]] = {}

    def check_admit(self) -> None:
        if self.draining:
            raise ApiError("shutting_down", "the server is shutting down: retry on another instance",
                           retry_after_s=1.0)

    def hold(self, owner: object, stop: Callable[[], None]) -> None:
        """`owner` holds an engine stream until release(owner); stop() ends it with `shutting_down`."""
        self._held[owner] = stop

    def release(self, owner: object) -> None:
        self._held.pop(owner, None)

    @property
    def in_flight(self) -> int:
        return len(self._held)

    async def run(self, grace_s: float, settle_s: float = 2.0) -> int:
        """Drain; -> how many streams had to be stopped at the end of the grace period."""
        self.draining = True
        deadline = time.monotonic() + grace_s
        if self._held:
            log.info("draining: %d streams in flight, up to %g s", len(self._held), grace_s)
        while self._held and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stopped = len(self._held)
        if stopped:
            log.warning("drain: stopping %d streams still running after %g s", stopped, grace_s)
            for stop in list(self._held.values()):
                stop()
            settle = time.monotonic() + settle_s  # their last messages go out before the sockets close
            while self._held and time.monotonic() < settle:
                await asyncio.sleep(0.02)
        return stopped
