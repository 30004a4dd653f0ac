"""Per-rate statistics, capacity and cost from hand-made request records."""

from __future__ import annotations

import math

import pytest

from bench.load.records import RequestRecord
from bench.load.summary import capacity, cost_per_million_chars, listeners, peak_in_flight, summarize


def rec(i: int, ttfa: float | None = 0.05, *, ok: bool = True, underruns: int = 0, measured: bool = True,
        chars: int = 40, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        index=i, measured=measured, sample_rate=24000, chars=chars, sentences=1, scheduled_at_s=float(i),
        sent_at_s=float(i) + 0.001, done_at_s=float(i) + 2, ok=ok, status=200 if ok else 503, error=error,
        ttfb_s=0.04 if ok else None, first_playable_s=0.04 if ok else None, onset_sample=0 if ttfa else None,
        audible_ttfa_s=ttfa, e2e_s=1.5 if ok else None, audio_s=3.0 if ok else 0.0, rtf=0.5 if ok else None,
        underruns=underruns, stall_total_s=0.02 * underruns, stall_max_s=0.02 if underruns else 0.0,
        stalls=[(0.5, 0.02)] * underruns, chunks=[])


def test_warm_up_requests_are_not_counted():
    s = summarize(10, [0], [rec(0, 9.0, measured=False), *[rec(i) for i in range(1, 21)]], 2.0, 3)
    assert s.requests == 20 and s.ok == 20 and s.audible_ttfa_s.p99 == 0.05
    assert s.chars_per_s == pytest.approx(20 * 40 / 2.0)
    assert s.audio_s_per_s == pytest.approx(20 * 3.0 / 2.0)
    assert s.send_lag_max_s == pytest.approx(0.001)
    assert s.sustained(0.1)


def test_failures_silence_and_underruns_break_a_rate():
    good = [rec(i) for i in range(40)]
    failed = summarize(5, [0], [*good, rec(40, None, ok=False, error="HTTP 503: full")], 10, 1)
    assert failed.ok == 40 and failed.errors == {"HTTP 503": 1} and not failed.sustained(0.1)
    assert failed.audible_ttfa_s.max == math.inf
    assert failed.served_audible_ttfa_s.n == 40 and failed.served_audible_ttfa_s.max == 0.05  # the refused left out
    silent = summarize(5, [0], [*good, rec(40, None)], 10, 1)
    assert silent.silent == 1 and not silent.sustained(0.1)
    assert silent.audible_ttfa_s.p95 == 0.05  # 1 of 41 is beyond p95 ...
    assert silent.audible_ttfa_s.p99 == math.inf  # ... but not beyond p99
    underrun = summarize(5, [0], [*good, rec(40, underruns=2)], 10, 1)
    assert underrun.underrun_requests == 1 and underrun.underrun_events == 2 and not underrun.sustained(0.1)
    slow = summarize(5, [0], [rec(i, 0.2) for i in range(40)], 10, 1)
    assert not slow.sustained(0.1) and slow.sustained(0.25)


def test_capacity_is_the_highest_rate_that_holds():
    holds = lambda rate: summarize(rate, [0], [rec(i) for i in range(10)], 10, 1)  # noqa: E731
    fails = lambda rate: summarize(rate, [0], [rec(i, 0.5) for i in range(10)], 10, 1)  # noqa: E731
    assert capacity([holds(1), holds(5), fails(10), holds(20), fails(30)], 0.1).rate == 20
    assert capacity([fails(1), fails(5)], 0.1) is None
    assert capacity([], 0.1) is None


def test_cost_per_million_characters():
    # serving.md's published claim: ~$1.9 per million characters at $4.29/h and 10 RPS of ~63 chars.
    assert cost_per_million_chars(4.29, 630) == pytest.approx(1.89, abs=0.01)
    assert cost_per_million_chars(3.6, 1000) == pytest.approx(1.0)
    assert cost_per_million_chars(3.6, 0) is None


def test_peak_in_flight_within_a_window():
    series = [(0.0, 0), (0.5, 1), (0.9, 2), (1.2, 5), (2.5, 3), (3.5, 9)]
    assert peak_in_flight(series, 1.0, 3.0) == 5
    assert peak_in_flight(series, 1.0, 1.1) == 2  # the level carried into the window
    assert peak_in_flight(series, 0.0, 10) == 9


def test_listeners_count_the_streams_playing_at_once_in_the_window():
    # rec(i): sent at i + 0.001 s, playable 0.04 s later, 3 s of audio (+ 0.02 s a stall): i = 0..3
    # play over [0.041, 3.041), [1.041, 4.041), [2.041, 5.041), [3.041, 6.041 + 0.04).
    records = [rec(0), rec(1), rec(2), rec(3, underruns=2), rec(4, None, ok=False)]
    mean, peak = listeners(records, 2.5, 3.5)
    assert peak == 3  # three carried in at 2.5; at 3.041 one ends as another starts
    assert mean == pytest.approx(3.0)
    mean, peak = listeners(records, 4.5, 6.5)
    assert peak == 2  # [2.041, 5.041) and [3.041, 6.081)
    assert mean == pytest.approx((2 * 0.541 + 1 * (6.081 - 5.041)) / 2.0)
    assert listeners([], 0.0, 1.0) == (0.0, 0)
    s = summarize(1, [0, 1], records, 2.0, 4, listening=[(2.0, 3), (4.0, 5)])
    assert (s.listeners_mean, s.listeners_peak) == (3.0, 5)


def test_server_silence_finds_a_pause_of_every_stream_but_not_an_idle_server():
    from dataclasses import replace

    from bench.load.summary import server_silence

    def stream(i: int, sent: float, times: list[float]) -> RequestRecord:
        return replace(rec(i), sent_at_s=sent, chunks=[(t, 1920) for t in times])

    a = stream(0, 0.0, [0.02, 0.10, 0.18, 0.26, 0.50, 0.58])  # a's audio stops from 0.26 to 0.50 s ...
    b = stream(1, 0.2, [0.03, 0.08, 0.31, 0.36])  # ... and so does b's, in the same window
    c = stream(2, 5.0, [0.02, 0.10])  # long after both ended: the idle gap before it is no pause
    gap, at = server_silence([a, b, c])
    assert gap == pytest.approx(0.50 - 0.28) and at == pytest.approx(0.28)
    assert server_silence([c]) == (pytest.approx(0.08), pytest.approx(5.02))
    assert server_silence([rec(0)]) == (0.0, None)  # no chunks at all
    s = summarize(10, [0], [a, b, c], 1.0, 2, server_silences=[server_silence([a, b, c]), (0.05, 1.0)])
    assert s.server_silence_max_s == pytest.approx(0.22) and s.server_silence_at_s == pytest.approx(0.28)
