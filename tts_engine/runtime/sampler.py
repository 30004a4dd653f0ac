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
        # fill_ with a Python scalar is a kernel argument. `t[row] = v` would copy a pageable host
        # tensor into the device one, which waits for every step queued on the stream (5.3 ms a
        # new stream at 40 req/s, with the GPU idle behind it).
        for t, v in zip(self.tensors(), values):
            t[row].fill_(v)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.do_sample, self.temperature, self.top_k, self.top_p, self.repetition_penalty,
                self.sub_do_sample, self.sub_temperature, self.sub_top_k, self.sub_top_p, self.seed,
                self.min_new_tokens)

    def gather(self, rows: torch.Tensor) -> SamplingRows:
        return SamplingRows(*(t[rows] for t in self.tensors()))


TOP_K_MAX = 64  # the largest top-k the fast variant serves (through torch.topk instead of a sort)


@dataclass(frozen=True)
class SamplerVariant:
    """What one captured sampler computes; the runner captures a graph per variant and bucket and
    picks per step, so each variant gives exactly the general sampler's ids on the rows it serves.

    top_k_max: top-k threshold from `torch.topk(top_k_max)` (the k-th largest value is the same
      value a full sort puts at k), valid for rows whose top_k is 0, >= V or <= top_k_max; None sorts.
    top_p: False leaves out the top-p sort, valid for rows whose top_p is 1."""

    top_k_max: int | None = None
    top_p: bool = True

    def serves(self, p: SamplingParams, vocab0: int, vocab: int) -> bool:
        """Does this variant give `p`'s exact ids (codebook 0 over vocab0 ids, the others over vocab)?"""
        for top_k, top_p, v in ((p.top_k, p.top_p, vocab0), (p.subtalker_top_k, p.subtalker_top_p, vocab)):
            if self.top_k_max is not None and 0 < top_k < v and top_k > self.top_k_max:
                return False
            if not self.top_p and top_p < 1.0:
                return False
        return True


GENERAL = SamplerVariant()
FAST = SamplerVariant(top_k_max=TOP_K_MAX, top_p=False)


@dataclass
class WarpRows:
    """Per-row warp settings in the shapes `warp` uses, built once per frame (the 15 code-predictor
    codebooks share them)."""

    temperature: torch.Tensor  # f32 [B, 1]
    kth_index: torch.Tensor  # i64 [B, 1]: column of the k-th largest score
    use_k: torch.Tensor  # bool [B, 1]
    top_p: torch.Tensor  # f32 [B, 1]

    @classmethod
    def of(cls, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, vocab: int,
           variant: SamplerVariant = GENERAL) -> WarpRows:
        k = vocab if variant.top_k_max is None else min(variant.top_k_max, vocab)
        return cls(temperature[:, None], (top_k.clamp(1, k) - 1)[:, None], ((top_k > 0) & (top_k < vocab))[:, None],
                   top_p[:, None])


def warp(scores: torch.Tensor, temperature: torch.Tensor | WarpRows, top_k: torch.Tensor | None = None,
         top_p: torch.Tensor | None = None, variant: SamplerVariant = GENERAL) -> torch.Tensor:
    """fp32 [B, V] -> temperature, per-row top-k (0 = off), per-row top-p (1 = off).
    Settings as [B] tensors, or prepared once as `WarpRows`."""
    v = scores.shape[-1]
    w = temperature if isinstance(temperature, WarpRows) else WarpRows.of(temperature, top_k, top_p, v, variant)
    scores = scores / w.temperature
    if variant.top_k_max is None:
        ranked = scores.sort(dim=-1, descending=True).values
    else:
        ranked = scores.topk(min(variant.top_k_max, v), dim=-1).values  # [B, k], descending
    scores = scores.masked_fill(w.use_k & (scores < ranked.gather(1, w.kth_index)), -math.inf)
    if not variant.top_p:
        return scores
    sorted_scores, order = scores.sort(dim=-1, descending=False)
    drop = sorted_scores.softmax(-1).cumsum(-1) <= 1 - w.top_p
    drop[:, -1] = False
    drop = drop & (w.top_p < 1.0)
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
                     eos_id: int, suppress: torch.Tensor, eos_allowed: torch.Tensor, *, u: torch.Tensor | None = None,
                     variant: SamplerVariant = GENERAL) -> torch.Tensor:
    """logits fp32 [B, V]; seen bool [B, V] (codebook-0 ids generated so far); frame i64 [B];
    eos_allowed bool [B] (False for random-weight rows with a forced length); u: this codebook's
    uniforms [B] f64 if already drawn -> ids [B]."""
    p = rows.repetition_penalty[:, None]
    scores = torch.where(seen, torch.where(logits < 0, logits * p, logits / p), logits)
    block_eos = (frame < rows.min_new_tokens) | ~eos_allowed
    scores[:, eos_id] = scores[:, eos_id].masked_fill(block_eos, -math.inf)
    scores = scores.masked_fill(suppress, -math.inf)
    greedy = scores.argmax(-1)
    if u is None:
        u = counter_uniform(rows.seed, frame, 0)
    sampled = pick(warp(scores, rows.temperature, rows.top_k, rows.top_p, variant), u)
    return torch.where(rows.do_sample, sampled, greedy)


def sample_codebook(logits: torch.Tensor, frame: torch.Tensor, codebook: int, rows: SamplingRows, *,
                    u: torch.Tensor | None = None, variant: SamplerVariant = GENERAL,
                    warp_rows: WarpRows | None = None) -> torch.Tensor:
    """Codebooks 1..15: fp32 [B, 2048] -> ids [B]. `u` (this codebook's uniforms [B]) and `warp_rows`
    (from the sub-talker settings, for this variant) may be prepared once per frame."""
    greedy = logits.argmax(-1)
    if u is None:
        u = counter_uniform(rows.seed, frame, codebook)
    if warp_rows is None:
        warp_rows = WarpRows.of(rows.sub_temperature, rows.sub_top_k, rows.sub_top_p, logits.shape[-1], variant)
    sampled = pick(warp(logits, warp_rows, variant=variant), u)
    return torch.where(rows.sub_do_sample, sampled, greedy)
