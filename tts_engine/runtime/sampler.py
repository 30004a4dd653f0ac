"""Batched, graph-safe sampling on the device: the same function as `tts_engine/sampling.py`,
row by row, with every per-request setting held in tensors so one captured graph serves any mix.

Randomness: splitmix64 of (seed, frame, codebook) in int64 arithmetic (wrapping multiply, logical
shifts by masking), bit-identical to `sampling.counter_uniform`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..sampling import SamplingParams


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


_C0, _C1, _C2 = (_signed(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _lsr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    x = x + _C0
    x = (x ^ _lsr(x, 30)) * _C1
    x = (x ^ _lsr(x, 27)) * _C2
    return x ^ _lsr(x, 31)


def counter_uniform(seed: torch.Tensor, frame: torch.Tensor, codebook: int | torch.Tensor) -> torch.Tensor:
    """int64 [B] x3 -> float64 uniforms [B] in [0, 1)."""
    h = _splitmix64(_splitmix64(_splitmix64(seed) ^ frame) ^ codebook)
    return _lsr(h, 11).double() / float(1 << 53)


@dataclass
class SamplingRows:
    """Per-row sampling settings as device tensors [B] (one slot per row)."""

    do_sample: torch.Tensor  # bool
    temperature: torch.Tensor  # f32
    top_k: torch.Tensor  # i64, 0 = off
    top_p: torch.Tensor  # f32
    repetition_penalty: torch.Tensor  # f32
    sub_do_sample: torch.Tensor
    sub_temperature: torch.Tensor
    sub_top_k: torch.Tensor
    sub_top_p: torch.Tensor
    seed: torch.Tensor  # i64
    min_new_tokens: torch.Tensor  # i64

    @classmethod
    def empty(cls, n: int, device) -> SamplingRows:
        f = dict(device=device)
        return cls(torch.zeros(n, dtype=torch.bool, **f), torch.ones(n, **f), torch.zeros(n, dtype=torch.long, **f),
                   torch.ones(n, **f), torch.ones(n, **f), torch.zeros(n, dtype=torch.bool, **f),
                   torch.ones(n, **f), torch.zeros(n, dtype=torch.long, **f), torch.ones(n, **f),
                   torch.zeros(n, dtype=torch.long, **f), torch.zeros(n, dtype=torch.long, **f))

    def set_row(self, row: int, p: SamplingParams, seed: int) -> None:
        values = (p.do_sample, p.temperature, p.top_k, p.top_p, p.repetition_penalty, p.subtalker_dosample,
                  p.subtalker_temperature, p.subtalker_top_k, p.subtalker_top_p, seed, p.min_new_tokens)
        for t, v in zip(self.tensors(), values):
            t[row] = v

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.do_sample, self.temperature, self.top_k, self.top_p, self.repetition_penalty,
                self.sub_do_sample, self.sub_temperature, self.sub_top_k, self.sub_top_p, self.seed,
                self.min_new_tokens)

    def gather(self, rows: torch.Tensor) -> SamplingRows:
        return SamplingRows(*(t[rows] for t in self.tensors()))


def warp(scores: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """fp32 [B, V] -> temperature, per-row top-k (0 = off), per-row top-p (1 = off)."""
    v = scores.shape[-1]
    scores = scores / temperature[:, None]
    kth = scores.sort(dim=-1, descending=True).values.gather(1, (top_k.clamp(1, v) - 1)[:, None])
    use_k = ((top_k > 0) & (top_k < v))[:, None]
    scores = scores.masked_fill(use_k & (scores < kth), -math.inf)
    sorted_scores, order = scores.sort(dim=-1, descending=False)
    drop = sorted_scores.softmax(-1).cumsum(-1) <= (1 - top_p)[:, None]
    drop[:, -1] = False
    drop = drop & (top_p < 1.0)[:, None]
    return scores.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), -math.inf)


def pick(scores: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF in id order: [B, V], uniforms [B] (f64) -> ids [B]."""
    cdf = scores.softmax(-1).cumsum(-1)
    target = (u * cdf[:, -1].double()).float()[:, None]
    idx = torch.searchsorted(cdf, target, right=True).clamp(max=scores.shape[-1] - 1)  # [B, 1]
    # u close to 1 can round the target up to the total: searchsorted then points past every id,
    # possibly at a filtered one. Step back to the last unfiltered id at or before it, as the
    # reference's walk-back does (without it codebook 0 can return a suppressed control id).
    ids = torch.arange(scores.shape[-1], device=scores.device).expand_as(scores)
    last_kept = torch.where(scores > -math.inf, ids, 0).cummax(-1).values  # [B, V]
    return last_kept.gather(1, idx)[:, 0]


def sample_codebook0(logits: torch.Tensor, seen: torch.Tensor, frame: torch.Tensor, rows: SamplingRows,
                     eos_id: int, suppress: torch.Tensor, eos_allowed: torch.Tensor) -> torch.Tensor:
    """logits fp32 [B, V]; seen bool [B, V] (codebook-0 ids generated so far); frame i64 [B];
    eos_allowed bool [B] (False for random-weight rows with a forced length) -> ids [B]."""
    p = rows.repetition_penalty[:, None]
    scores = torch.where(seen, torch.where(logits < 0, logits * p, logits / p), logits)
    block_eos = (frame < rows.min_new_tokens) | ~eos_allowed
    scores[:, eos_id] = scores[:, eos_id].masked_fill(block_eos, -math.inf)
    scores = scores.masked_fill(suppress, -math.inf)
    greedy = scores.argmax(-1)
    u = counter_uniform(rows.seed, frame, 0)
    sampled = pick(warp(scores, rows.temperature, rows.top_k, rows.top_p), u)
    return torch.where(rows.do_sample, sampled, greedy)


def sample_codebook(logits: torch.Tensor, frame: torch.Tensor, codebook: int, rows: SamplingRows) -> torch.Tensor:
    """Codebooks 1..15: fp32 [B, 2048] -> ids [B]."""
    greedy = logits.argmax(-1)
    u = counter_uniform(rows.seed, frame, codebook)
    sampled = pick(warp(logits, rows.sub_temperature, rows.sub_top_k, rows.sub_top_p), u)
    return torch.where(rows.sub_do_sample, sampled, greedy)
