"""Admission control: refuse a stream before any expensive work when it would break a cap or make
the admitted streams underrun. No torch; thread-safe (callers admit from their own threads, the
engine thread releases and publishes capacity).

Underrun prediction: each engine cycle yields FRAME_S (80 ms) of audio per decoding stream, so
real time holds while the predicted cycle for the decoding streams stays under FRAME_S / margin.
The engine thread turns its cost model into `sustainable` (the most decoding streams that meet
that) after each measurement; admission compares the decoding count the new stream would make
against it. Retry-After: the streams that must leave first, divided by the recent finish rate.

First-audio SLO, a p95: a stream that finds every slot taken waits for k finishes, one per stream
ahead of it (admitted streams less those waiting for their text, which need no slot yet). Finishes
come about as a Poisson process at the recent finish rate r, so the wait's 95th percentile is about
(k + 2 sqrt(k)) / r (the gamma distribution's: 3.0 / r for k = 1, 7.75 / r for k = 4). To it comes
the time from a slot to first audio, taken as its recent mean plus twice its mean deviation, which
the engine thread keeps. A stream whose first audio that puts past the SLO is refused at once with
Retry-After instead of queued: past capacity the queue stays as short as the SLO allows, and the
admitted streams keep their first-audio time.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

RATE_WINDOW_S = 10.0
MIN_RETRY_S, MAX_RETRY_S = 1.0, 30.0
# The finish rate the SLO uses spans at least this long: a few finishes close together after an
# idle spell would otherwise read as a burst rate the slots cannot keep.
MIN_RATE_SPAN_S = 1.0
SLOT_TO_AUDIO_ALPHA = 0.2  # weight of a new reading in the slot -> first audio mean and deviation


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

    def recent_per_s(self, now: float) -> float:
        """Per second over the window, or over the span since the oldest event in it when that is
        shorter (at least MIN_RATE_SPAN_S): the rate as it is now, also in the window's first seconds."""
        self._trim(now)
        if not self._times:
            return 0.0
        return len(self._times) / min(RATE_WINDOW_S, max(MIN_RATE_SPAN_S, now - self._times[0]))


class Admission:
    def __init__(self, max_active: int, max_queued: int, reject_predicted_underrun: bool,
                 first_audio_slo_s: float = 0.0):
        self.lock = threading.Lock()  # hold it around try_admit and handing the stream to the engine
        self.max_active, self.max_queued = max_active, max_queued
        self.reject_predicted_underrun = reject_predicted_underrun
        self.first_audio_slo_s = first_audio_slo_s  # 0: off
        self.admitted = 0  # admitted and not yet finished
        self.sustainable = max_active  # decoding streams the cost model says stay real time
        self.slot_to_audio_s = 0.0  # slot -> first audio sent: recent mean ...
        self.slot_to_audio_dev_s = 0.0  # ... and mean deviation from it
        self.waiting_text = 0  # admitted streams whose text has not come (the engine thread counts them)
        self.counts = {"admitted": 0, "rejected": 0, "rejected_caps": 0, "rejected_underrun": 0,
                       "rejected_slo": 0}
        self._arrivals = _Rate()
        self._finishes = _Rate()
        # Where a call gives no time: the engine's clock (the scheduler's `now` is time.monotonic() too);
        # a simulation with a clock of its own sets its own, so that finishes and admissions share it.
        self.clock = time.monotonic

    def try_admit(self, now: float | None = None) -> AdmissionDecision:
        """Call with `lock` held. Counts the stream as admitted when it is."""
        now = self.clock() if now is None else now
        cap = self.max_active + self.max_queued
        if self.admitted >= cap:
            return self._reject("caps", f"server is at capacity ({self.admitted} streams)",
                                self.admitted - cap + 1, now)
        must_leave = self.admitted - self.waiting_text - self.max_active + 1
        if self.first_audio_slo_s and must_leave > 0:
            rate = self._finishes.recent_per_s(now)
            wait_s = (must_leave + 2 * math.sqrt(must_leave)) / rate if rate > 0 else math.inf
            first_audio_s = wait_s + self.slot_to_audio_high_s()
            if first_audio_s > self.first_audio_slo_s:
                predicted = "unknown (no stream finished lately)" if math.isinf(first_audio_s) \
                    else f"~{first_audio_s * 1e3:.0f} ms"
                return self._reject("slo", f"every slot is taken and {must_leave} streams must finish first: "
                                    f"first audio {predicted}, over the server's first-audio SLO of "
                                    f"{self.first_audio_slo_s * 1e3:.0f} ms", must_leave, now)
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
            self._finishes.add(self.clock() if now is None else now)

    def text_waits(self, change: int) -> None:
        """Engine thread: a stream began (+1) or ended (-1) waiting for its text."""
        with self.lock:
            self.waiting_text += change

    def observe_first_audio(self, after_slot_s: float) -> None:
        """Engine thread: a stream's first audio went out this long after it got its slot."""
        with self.lock:
            error = after_slot_s - self.slot_to_audio_s
            self.slot_to_audio_dev_s += SLOT_TO_AUDIO_ALPHA * (abs(error) - self.slot_to_audio_dev_s)
            self.slot_to_audio_s += SLOT_TO_AUDIO_ALPHA * error

    def slot_to_audio_high_s(self) -> float:
        """Slot -> first audio as the SLO takes it: the mean plus twice the mean deviation."""
        return self.slot_to_audio_s + 2 * self.slot_to_audio_dev_s

    def publish_capacity(self, sustainable: int) -> None:
        with self.lock:
            self.sustainable = sustainable

    def arrivals_per_s(self, now: float | None = None) -> float:
        with self.lock:
            return self._arrivals.per_s(self.clock() if now is None else now)
