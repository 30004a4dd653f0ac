"""The Poisson schedule: deterministic, open-loop, exponential gaps at the asked rate."""

from __future__ import annotations

import itertools
import math

import pytest

from bench.load.arrivals import hash_unit, inter_arrival_s, poisson_schedule


def test_same_seed_same_schedule_other_seed_other_schedule():
    a = poisson_schedule(10, 2, 10, seed=1)
    assert a == poisson_schedule(10, 2, 10, seed=1)
    assert [x.at_s for x in a] != [x.at_s for x in poisson_schedule(10, 2, 10, seed=2)]


def test_schedule_at_rate_r_is_the_rate_one_schedule_scaled():
    slow = poisson_schedule(1, 0, 100, seed=7)
    fast = poisson_schedule(20, 0, 5, seed=7)
    n = min(len(slow), len(fast))
    assert n > 50
    for s, f in zip(slow[:n], fast[:n]):
        assert f.index == s.index and f.at_s == pytest.approx(s.at_s / 20)


def test_phases_and_bounds():
    sched = poisson_schedule(50, 1.0, 2.0, seed=0)
    assert all(0 < a.at_s < 3.0 for a in sched)
    assert [a.index for a in sched] == list(range(len(sched)))
    assert all(a.measured == (a.at_s >= 1.0) for a in sched)
    assert any(not a.measured for a in sched) and any(a.measured for a in sched)
    assert all(x.at_s < y.at_s for x, y in itertools.pairwise(sched))


def test_gaps_are_exponential_with_mean_one_over_rate():
    n = 20_000
    gaps = [inter_arrival_s(3, i, 8.0) for i in range(n)]
    mean = sum(gaps) / n
    assert mean == pytest.approx(1 / 8, rel=0.03)  # standard error of the mean: 0.7 %
    beyond_mean = sum(g > 1 / 8 for g in gaps) / n
    assert beyond_mean == pytest.approx(math.exp(-1), abs=0.015)  # P(gap > mean) = 1/e
    beyond_3 = sum(g > 3 / 8 for g in gaps) / n
    assert beyond_3 == pytest.approx(math.exp(-3), abs=0.01)


def test_hash_units_are_uniform_and_streams_independent():
    us = [hash_unit(0, i) for i in range(10_000)]
    assert all(0 <= u < 1 for u in us)
    assert sum(us) / len(us) == pytest.approx(0.5, abs=0.01)
    assert hash_unit(0, 5, "arrival") != hash_unit(0, 5, "text")


@pytest.mark.parametrize(("rps", "warmup", "duration"), [(0, 1, 1), (1, -1, 1), (1, 0, 0)])
def test_bad_parameters_are_refused(rps, warmup, duration):
    with pytest.raises(ValueError):
        poisson_schedule(rps, warmup, duration, seed=0)
