"""Nearest-rank percentiles: worked examples."""

from __future__ import annotations

import math

import pytest

from bench.load.percentiles import distribution, nearest_rank


@pytest.mark.parametrize(("p", "expected"), [(5, 15), (30, 20), (40, 20), (50, 35), (100, 50)])
def test_textbook_example(p, expected):
    assert nearest_rank([15, 20, 35, 40, 50], p) == expected  # order of the input does not matter
    assert nearest_rank([50, 40, 35, 20, 15], p) == expected


def test_one_to_hundred_and_small_samples():
    values = list(range(1, 101))
    assert [nearest_rank(values, p) for p in (50, 95, 99)] == [50, 95, 99]
    assert nearest_rank(range(1, 21), 95) == 19  # rank ceil(19.0) = 19
    assert nearest_rank(range(1, 21), 99) == 20  # rank ceil(19.8) = 20
    assert nearest_rank([7.0], 99) == 7.0
    assert nearest_rank([], 50) is None


def test_always_an_observed_value_never_interpolated():
    assert nearest_rank([1.0, 2.0], 50) == 1.0
    assert nearest_rank([1.0, 2.0], 51) == 2.0


def test_bad_percentiles_are_refused():
    for p in (0, -1, 101):
        with pytest.raises(ValueError):
            nearest_rank([1, 2], p)


def test_a_failed_request_counts_as_infinite():
    d = distribution([0.01] * 19 + [math.inf])
    assert d.p50 == 0.01 and d.p95 == 0.01 and d.p99 == math.inf  # 1 failure in 20 is beyond p95
    assert d.n == 20 and d.mean == pytest.approx(0.01) and d.max == math.inf
    d = distribution([0.01] * 9 + [math.inf])
    assert d.p95 == math.inf
