"""Open-loop Poisson arrival schedule, deterministic from (seed, index).

The reference method (serving.md) draws inter-arrival gaps as `-log1p(-u) / rps` with `u` taken
from a hash of (seed, index), so a schedule does not depend on a random generator's state, on the
run's length or on the rate: the same seed at rate r is the rate-1 schedule scaled by 1/r, and
request i carries the same text at every rate.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

_TWO_64 = float(1 << 64)


def hash_unit(seed: int, index: int, stream: str = "arrival") -> float:
    """A uniform number in [0, 1) from (seed, index, stream); `stream` separates independent uses
    (arrival gaps, text choice) so they never share draws."""
    digest = hashlib.blake2b(f"{stream}:{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / _TWO_64


def inter_arrival_s(seed: int, index: int, rps: float) -> float:
    """Gap before request `index`: exponential with mean 1/rps (inverse-CDF of u)."""
    return -math.log1p(-hash_unit(seed, index)) / rps


@dataclass(frozen=True)
class Arrival:
    index: int
    at_s: float  # seconds after the run's start
    measured: bool  # False during warm-up


def poisson_schedule(rps: float, warmup_s: float, duration_s: float, seed: int) -> list[Arrival]:
    """Arrivals in [0, warmup_s + duration_s): those before warmup_s are warm-up, the rest measured.

    The first request arrives after one gap (not at 0), like every other one.
    """
    if rps <= 0 or warmup_s < 0 or duration_s <= 0:
        raise ValueError(f"need rps > 0, warmup_s >= 0, duration_s > 0 (got {rps}, {warmup_s}, {duration_s})")
    end = warmup_s + duration_s
    out: list[Arrival] = []
    t = 0.0
    index = 0
    while True:
        t += inter_arrival_s(seed, index, rps)
        if t >= end:
            return out
        out.append(Arrival(index, t, t >= warmup_s))
        index += 1
