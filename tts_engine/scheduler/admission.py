"""Admission control: refuse a stream before any expensive work when it would break a cap or make
the admitted streams underrun. No torch; thread-safe (callers admit from their own threads, the
engine thread releases and publishes capacity).

Underrun prediction: each engine cycle yields FRAME_S (80 ms) of audio per decoding stream, so
real time holds while the predicted cycle for the decoding streams stays under FRAME_S / margin.
The engine thread turns its cost model into `sustainable` (the most decoding streams that meet
that) after each measurement; admission compares the decoding count the new stream would make
against it. Retry-After: the streams that must leave first, divided by the recent finish rate.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

RATE_WINDOW_S = 10.0
MIN_RETRY_S, MAX_RETRY_S = 1.0, 30.0


@dataclass(frozen=True)
class AdmissionDecision:
    admitted: bool
    reason: str = ""
    retry_after_s: float = 0.0


class _Rate:
    """Events per second over the last RATE_WINDOW_S."""

    def __init__(self):
        self._times: deque[float] = deque()

    def add(self, now: float) -> None:
        self._times.append(now)
        self._trim(now)

    def _trim(self, now: float) -> None:
        while self._times and (self._times[0] < now - RATE_WINDOW_S or len(self._times) > 10_000):
            self._times.popleft()

    def per_s(self, now: float) -> float:
        self._trim(now)
        if not self._times:
            return 0.0
        return len(self._times) / RATE_WINDOW_S


class Admission:
    def __init__(self, max_active: int, max_queued: int, reject_predicted_underrun: bool):
        self.lock = threading.Lock()  # hold it around try_admit and handing the stream to the engine
        self.max_active, self.max_queued = max_active, max_queued
        self.reject_predicted_underrun = reject_predicted_underrun
        self.admitted = 0  # admitted and not yet finished
        self.sustainable = max_active  # decoding streams the cost model says stay real time
        self.counts = {"admitted": 0, "rejected": 0, "rejected_caps": 0, "rejected_underrun": 0}
        self._arrivals = _Rate()
        self._finishes = _Rate()

    def try_admit(self, now: float | None = None) -> AdmissionDecision:
        """Call with `lock` held. Counts the stream as admitted when it is."""
        now = time.monotonic() if now is None else now
        cap = self.max_active + self.max_queued
        if self.admitted >= cap:
            return self._reject("caps", f"server is at capacity ({self.admitted} streams)",
                                self.admitted - cap + 1, now)
        decoding = min(self.admitted + 1, self.max_active)
        # An empty engine always takes one stream: the prediction is refreshed only by the steps
        # streams make, so refusing the first would keep a pessimistic estimate forever.
        if self.reject_predicted_underrun and self.admitted > 0 and decoding > self.sustainable:
            return self._reject("underrun", f"one more stream would make the {self.admitted} admitted streams "
                                f"underrun (real time holds for {self.sustainable})",
                                decoding - self.sustainable, now)
        self.admitted += 1
        self.counts["admitted"] += 1
        self._arrivals.add(now)
        return AdmissionDecision(True)

    def _reject(self, kind: str, message: str, must_leave: int, now: float) -> AdmissionDecision:
        self.counts["rejected"] += 1
        self.counts[f"rejected_{kind}"] += 1
        return AdmissionDecision(False, message, self.retry_after_s(must_leave, now))

    def retry_after_s(self, must_leave: int, now: float) -> float:
        rate = self._finishes.per_s(now)
        if rate <= 0.0:
            return MIN_RETRY_S
        return min(MAX_RETRY_S, max(MIN_RETRY_S, must_leave / rate))

    def release(self, now: float | None = None) -> None:
        """A stream admitted earlier has finished (any way)."""
        with self.lock:
            if self.admitted <= 0:
                raise RuntimeError("admission released more streams than it admitted")
            self.admitted -= 1
            self._finishes.add(time.monotonic() if now is None else now)

    def publish_capacity(self, sustainable: int) -> None:
        with self.lock:
            self.sustainable = sustainable

    def arrivals_per_s(self, now: float | None = None) -> float:
        with self.lock:
            return self._arrivals.per_s(time.monotonic() if now is None else now)
