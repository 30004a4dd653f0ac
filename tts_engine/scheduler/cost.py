"""Step-time cost model, learned online. No torch.

Three kinds of work, each keyed by its shape:
  frame step    by batch bucket
  prefill       by prompt length, rounded up to a power of two (>= 16 rows)
  codec chunk   by (frames, batch rounded up to a power of two)
Each key holds an exponential moving average of measured device times, seeded by a formula (H200
stage-bench figures until measured). A key never measured follows its kind's seed
formula times that kind's learned scale (the EMA of measured / seed over all keys), so one CPU
measurement at batch 1 also moves the estimate at batch 32.

Once a key has its own measurements, a new one counts at most OUTLIER_FACTOR times the estimate:
a step stretched by a host pause (its device timer spans the idle gap, ~200 ms for a garbage
collection) would otherwise multiply the estimate, and admission, which predicts
real time from it, refused every arrival for half a second. A lasting slowdown still shows within a
few steps (each clipped measurement moves the estimate by alpha x (OUTLIER_FACTOR - 1)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .request import FRAME_S

OUTLIER_FACTOR = 4.0


@dataclass(frozen=True)
class CostSeeds:
    """Seconds before any measurement: graph-replayed H200 times of the 1.7B model."""

    frame_base_s: float = 6.4e-3  # whole frame step at batch 1 (6.37 ms), 7.18 ms at batch 64
    frame_per_row_s: float = 0.012e-3
    prefill_base_s: float = 2.0e-3
    prefill_per_row_s: float = 0.01e-3
    chunk_base_s: float = 2.5e-3  # incremental chunk, 1 frame, batch 1: 2.75 ms
    chunk_per_frame_row_s: float = 0.1e-3  # 12 frames x batch 32: 38.5 ms


def pow2_at_least(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, math.ceil(math.log2(max(1, n)))))


class CostModel:
    def __init__(self, buckets: tuple[int, ...], seeds: CostSeeds | None = None, alpha: float = 0.2):
        if not buckets:
            raise ValueError("the cost model needs the captured batch buckets")
        self.buckets = tuple(sorted(buckets))
        self.seeds = seeds or CostSeeds()
        self.alpha = alpha
        self._ema: dict[tuple, float] = {}  # (kind, *key) -> seconds
        self._scale = {"frame": 1.0, "prefill": 1.0, "chunk": 1.0}
        self.observations = 0

    # -- shapes ------------------------------------------------------------------------------------
    def bucket_for(self, rows: int) -> int:
        """Smallest captured bucket holding `rows` (the largest when none does)."""
        return next((b for b in self.buckets if b >= rows), self.buckets[-1])

    def _seed(self, kind: str, key: tuple[int, ...]) -> float:
        s = self.seeds
        if kind == "frame":
            return s.frame_base_s + s.frame_per_row_s * key[0]
        if kind == "prefill":
            return s.prefill_base_s + s.prefill_per_row_s * key[0]
        return s.chunk_base_s + s.chunk_per_frame_row_s * key[0] * key[1]

    def _get(self, kind: str, key: tuple[int, ...]) -> float:
        v = self._ema.get((kind, *key))
        return v if v is not None else self._seed(kind, key) * self._scale[kind]

    def _observe(self, kind: str, key: tuple[int, ...], seconds: float) -> None:
        if not (seconds >= 0.0 and math.isfinite(seconds)):
            return
        a = self.alpha
        old = self._get(kind, key)
        if (kind, *key) in self._ema:  # measured before
            seconds = min(seconds, OUTLIER_FACTOR * old)
        self._ema[(kind, *key)] = old + a * (seconds - old)
        self._scale[kind] += a * (seconds / self._seed(kind, key) - self._scale[kind])
        self.observations += 1

    # -- estimates -----------------------------------------------------------------------------------
    def frame_step_s(self, bucket: int) -> float:
        return self._get("frame", (bucket,))

    def prefill_s(self, prompt_len: int) -> float:
        return self._get("prefill", (pow2_at_least(prompt_len, 16),))

    def chunk_s(self, num_frames: int, batch: int) -> float:
        return self._get("chunk", (num_frames, pow2_at_least(batch)))

    # -- measurements --------------------------------------------------------------------------------
    def observe_frame_step(self, bucket: int, seconds: float) -> None:
        self._observe("frame", (bucket,), seconds)

    def observe_prefill(self, prompt_len: int, seconds: float) -> None:
        self._observe("prefill", (pow2_at_least(prompt_len, 16),), seconds)

    def observe_chunk(self, num_frames: int, batch: int, seconds: float) -> None:
        self._observe("chunk", (num_frames, pow2_at_least(batch)), seconds)

    # -- real time -----------------------------------------------------------------------------------
    def cycle_s(self, streams: int, *, chunk_frames: int = 12, arrivals_per_s: float = 0.0,
                prompt_len: int = 64, codec_tick: int = 0) -> float:
        """Predicted wall time for every one of `streams` decoding streams to get one more frame
        (and its audio): one frame step at their bucket, plus the codec share (each stream sends a
        chunk of `chunk_frames` frames every `chunk_frames` steps, chunks of a step share a call;
        with a codec tick, every stream's `codec_tick` frames in one call every `codec_tick` steps),
        stretched by the time new arrivals spend in prefill."""
        if streams <= 0:
            return 0.0
        frame = self.frame_step_s(self.bucket_for(streams))
        if codec_tick > 0:
            codec = self.chunk_s(codec_tick, streams) / codec_tick
        else:
            chunks_per_step = streams / chunk_frames
            codec = self.chunk_s(chunk_frames, math.ceil(chunks_per_step)) * min(1.0, chunks_per_step)
        busy = arrivals_per_s * self.prefill_s(prompt_len)  # fraction of time spent in prefills
        return math.inf if busy >= 1.0 else (frame + codec) / (1.0 - busy)

    def sustainable_streams(self, limit: int, margin: float, **load) -> int:
        """Most decoding streams (<= limit) whose predicted cycle still yields audio in real time."""
        best = 0
        for n in range(1, limit + 1):
            if self.cycle_s(n, **load) * margin <= FRAME_S:
                best = n
        return best
