"""Per-rate statistics over measured requests, capacity and cost.

Every measured request counts: one that failed or never became audible enters the audible-TTFA
distribution as +inf (it was never heard), so it can only push the percentiles up. Several seeds
of one rate are pooled (their requests and measured durations add up).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import asdict, dataclass

from .percentiles import Distribution, distribution
from .records import RequestRecord
from .server_metrics import pooled

INF = math.inf


@dataclass(frozen=True)
class RateSummary:
    rate: float  # offered requests per second (the schedule's rate)
    seeds: list[int]
    measured_s: float  # summed measured-phase length over the pooled trials
    requests: int
    ok: int
    errors: dict[str, int]  # short error label -> count
    silent: int  # finished but no audible onset
    audible_ttfa_s: Distribution
    ttfb_s: Distribution
    first_playable_s: Distribution
    e2e_s: Distribution
    rtf: Distribution
    underrun_requests: int
    underrun_events: int
    stall_total_s: float
    stall_max_s: float
    peak_in_flight: int  # largest over the pooled trials, measured phase
    send_lag_max_s: float  # how far the client fell behind its schedule (should be ~0)
    chars_per_s: float  # characters of successful requests per measured second
    audio_s_per_s: float  # seconds of audio delivered per measured second
    # The client's own event-loop pauses (driver.LOOP_STALL_S), and the underrun events of measured
    # requests whose dry spell overlaps one: those may be the client's, not the server's.
    client_stall_max_s: float = 0.0
    underruns_in_client_stalls: int = 0
    # The longest time in which no request received audio although one was mid-audio (had its first
    # chunk, not yet its last), over the pooled trials: a pause of the whole server, not of one stream
    # (a garbage collection of the server's heap pauses every stream at once). `_at_s`: its start, in
    # seconds from its trial's start.
    server_silence_max_s: float = 0.0
    server_silence_at_s: float | None = None
    # The engine's own counters during the measured trials (server_metrics.during, pooled over seeds):
    # host time by part, garbage-collection pauses, steps. None for a target without them (a peer).
    server: dict[str, float] | None = None
    # Streams being listened to at once in the measured phase (`listeners`), mean over the pooled
    # trials and their largest: with long texts, many more than are in flight at the server.
    listeners_mean: float = 0.0
    listeners_peak: int = 0
    # Audible TTFA of the served requests alone (refused and failed ones left out): past capacity,
    # what the streams a server admits get, which `audible_ttfa_s` hides behind the refusals' +inf.
    served_audible_ttfa_s: Distribution | None = None

    def sustained(self, slo_s: float) -> bool:
        """The rate holds: every request succeeded and became audible, p95 audible TTFA within slo_s,
        no underrun. (A failed or silent request would already count as +inf in the TTFA
        percentiles, but one in a hundred hides beyond p95: a rate that drops requests does not hold.)"""
        p95 = self.audible_ttfa_s.p95
        return (self.requests > 0 and self.ok == self.requests and self.silent == 0 and p95 is not None
                and p95 <= slo_s and self.underrun_requests == 0)

    def as_dict(self) -> dict:
        return asdict(self)


def _error_label(error: str) -> str:
    return error.split(":", 1)[0][:60]


def underruns_in_stalls(records: list[RequestRecord], client_stalls: list[tuple[float, float]]) -> int:
    """Underrun events of measured requests whose dry spell overlaps a pause of the client's loop
    (times in seconds from the trial's start; one trial's records and stalls)."""
    count = 0
    for r in records:
        if not r.measured or r.sent_at_s is None:
            continue
        for at, length in r.stalls:
            a, b = r.sent_at_s + at, r.sent_at_s + at + length
            count += any(s < b and a < s + n for s, n in client_stalls)
    return count


def server_silence(records: list[RequestRecord]) -> tuple[float, float | None]:
    """One trial's longest gap between two consecutive chunk arrivals (of any requests) that some
    request spans mid-audio, and where it starts (seconds from the trial's start); (0, None) if none."""
    spans, arrivals = [], []
    for r in records:
        if r.sent_at_s is None or not r.chunks:
            continue
        times = [r.sent_at_s + at for at, _ in r.chunks]
        spans.append((times[0], times[-1]))
        arrivals += times
    arrivals.sort()
    gaps = sorted(((b - a, a, b) for a, b in itertools.pairwise(arrivals) if b > a), reverse=True)
    for gap, a, b in gaps:
        if any(first <= a and b <= last for first, last in spans):
            return gap, a
    return 0.0, None


def summarize(rate: float, seeds: list[int], records: list[RequestRecord], measured_s: float,
              peak_in_flight: int, client_stalls: list[list[tuple[float, float]]] | None = None,
              underruns_in_client_stalls: int = 0,
              server_silences: list[tuple[float, float | None]] | None = None,
              server: list[dict[str, float]] | None = None,
              listening: list[tuple[float, int]] | None = None) -> RateSummary:
    """client_stalls: the client's loop pauses, per trial; underruns_in_client_stalls: their count
    from `underruns_in_stalls`, per trial and summed; server_silences: `server_silence` per trial;
    server: the engine's counters per trial (`server_metrics.during`); listening: `listeners` per
    trial."""
    silence = max(server_silences or [(0.0, None)], key=lambda s: s[0])
    rs = [r for r in records if r.measured]
    ok = [r for r in rs if r.ok]

    def lat(attr: str) -> Distribution:
        return distribution([v if (v := getattr(r, attr)) is not None and r.ok else INF for r in rs])

    lags = [lag for r in rs if (lag := r.send_lag_s) is not None]
    return RateSummary(
        rate=rate, seeds=seeds, measured_s=measured_s, requests=len(rs), ok=len(ok),
        errors=dict(Counter(_error_label(r.error) for r in rs if r.error)),
        silent=sum(r.ok and r.onset_sample is None for r in rs),
        audible_ttfa_s=lat("audible_ttfa_s"), ttfb_s=lat("ttfb_s"), first_playable_s=lat("first_playable_s"),
        e2e_s=lat("e2e_s"), rtf=distribution([r.rtf for r in ok if r.rtf is not None]),
        underrun_requests=sum(r.underruns > 0 for r in rs), underrun_events=sum(r.underruns for r in rs),
        stall_total_s=sum(r.stall_total_s for r in rs), stall_max_s=max((r.stall_max_s for r in rs), default=0.0),
        peak_in_flight=peak_in_flight, send_lag_max_s=max(lags, default=0.0),
        chars_per_s=sum(r.chars for r in ok) / measured_s if measured_s > 0 else 0.0,
        audio_s_per_s=sum(r.audio_s for r in ok) / measured_s if measured_s > 0 else 0.0,
        client_stall_max_s=max((n for t in client_stalls or [] for _, n in t), default=0.0),
        underruns_in_client_stalls=underruns_in_client_stalls,
        server_silence_max_s=silence[0], server_silence_at_s=silence[1], server=pooled(server or []),
        listeners_mean=sum(m for m, _ in listening) / len(listening) if listening else 0.0,
        listeners_peak=max((p for _, p in listening or []), default=0),
        served_audible_ttfa_s=distribution([r.audible_ttfa_s if r.audible_ttfa_s is not None else INF for r in ok]))


def peak_in_flight(series: list[tuple[float, int]], start_s: float, end_s: float) -> int:
    """Largest in-flight count in [start_s, end_s], including the level carried in at start_s."""
    level, peak = 0, 0
    for t, n in series:
        if t <= start_s:
            level = n
            continue
        if t > end_s:
            break
        peak = max(peak, n)
    return max(peak, level)


def listeners(records: list[RequestRecord], start_s: float, end_s: float) -> tuple[float, int]:
    """Streams being played at once in [start_s, end_s] (seconds from the trial's start): the
    time-weighted mean and the peak. A served request plays from its first playable audio for its
    audio's length plus its stalls (the zero-buffer listener of `playout`)."""
    events = sorted((t, d) for r in records if r.ok and r.sent_at_s is not None and r.first_playable_s is not None
                    for t, d in ((r.sent_at_s + r.first_playable_s, 1),
                                 (r.sent_at_s + r.first_playable_s + r.audio_s + r.stall_total_s, -1)))
    level = peak = sum(d for t, d in events if t <= start_s)  # the level carried into the window
    area, cursor = 0.0, start_s
    for t, d in events:
        if t <= start_s:
            continue
        if t > end_s:
            break
        area += level * (t - cursor)
        cursor, level = t, level + d
        peak = max(peak, level)
    area += level * (end_s - cursor)
    return (area / (end_s - start_s) if end_s > start_s else 0.0), peak


def capacity(summaries: list[RateSummary], slo_s: float) -> RateSummary | None:
    """The highest rate that holds (serving.md: p95 audible TTFA <= SLO and zero underruns)."""
    held = [s for s in summaries if s.sustained(slo_s)]
    return max(held, key=lambda s: s.rate, default=None)


def cost_per_million_chars(gpu_price_per_hour: float, chars_per_s: float) -> float | None:
    """Dollars per million characters when the GPU is rented at `gpu_price_per_hour` and keeps
    serving `chars_per_s` characters per second (1e6 / (chars/s * 3600) hours per million)."""
    if chars_per_s <= 0:
        return None
    return gpu_price_per_hour * 1e6 / (chars_per_s * 3600.0)
