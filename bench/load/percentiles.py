"""Nearest-rank percentiles (serving.md): the value at rank ceil(p/100 * N) of the sorted sample,
always one of the observed values (no interpolation). A missing observation that must count
against a percentile (a request that failed or never became audible) enters as +inf."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

REPORTED = (50, 95, 99)


def nearest_rank(values: Iterable[float], p: float) -> float | None:
    """The p-th nearest-rank percentile (0 < p <= 100); None for an empty sample."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {p}")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = math.ceil(p / 100.0 * len(ordered))
    return ordered[max(rank, 1) - 1]


@dataclass(frozen=True)
class Distribution:
    n: int
    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None  # of the finite values
    max: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def distribution(values: Iterable[float]) -> Distribution:
    vals = list(values)
    finite = [v for v in vals if math.isfinite(v)]
    p50, p95, p99 = (nearest_rank(vals, p) for p in REPORTED)
    return Distribution(len(vals), p50, p95, p99, sum(finite) / len(finite) if finite else None,
                        max(vals) if vals else None)
