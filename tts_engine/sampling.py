"""Sampling for codebook 0 (talker) and codebooks 1..15 (code predictor).

Processor order is the reference's (Hugging Face `generate`): repetition penalty over the
codebook-0 ids generated so far, min-new-tokens (EOS masked for the first frames), suppression of
the non-code ids, then temperature, top-k, top-p. Greedy takes the argmax after the first three.

Randomness is counter-based: the uniform that picks a token is a hash of (seed, frame, codebook),
so a seeded request yields the same codes whatever its position in a batch and whichever path
(eager reference or CUDA-graph fast path) computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from .config import SamplingDefaults

_MASK64 = (1 << 64) - 1
# Accepted sampling settings (inclusive): 1e-6 is near-greedy, 1e6 near-uniform; both and every
# logit divided by them stay finite in fp32.
TEMPERATURE_RANGE = (1e-6, 1e6)
REPETITION_PENALTY_RANGE = (1e-3, 1e3)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def counter_uniform(seed: int, frame: int, codebook: int) -> float:
    """Uniform in [0, 1) from (seed, frame, codebook): 53 random bits."""
    h = _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ frame) ^ codebook)
    return (h >> 11) / float(1 << 53)


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling. `seed=None` draws a fresh seed when the request starts."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    seed: int | None = None
    min_new_tokens: int = 2

    @classmethod
    def from_defaults(cls, d: SamplingDefaults, **overrides) -> SamplingParams:
        base = cls(do_sample=d.do_sample, temperature=d.temperature, top_k=d.top_k, top_p=d.top_p,
                   repetition_penalty=d.repetition_penalty, subtalker_dosample=d.subtalker_dosample,
                   subtalker_temperature=d.subtalker_temperature, subtalker_top_k=d.subtalker_top_k,
                   subtalker_top_p=d.subtalker_top_p)
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def greedy(cls, **overrides) -> SamplingParams:
        return replace(cls(do_sample=False, subtalker_dosample=False), **overrides)

    def validate(self) -> SamplingParams:
        # Bounded so that the device's fp32 copies hold them and logits / temperature stays finite (a
        # temperature of 3.5e38 once overflowed the sampler's fp32 table on the engine thread).
        lo, hi = TEMPERATURE_RANGE
        for name in ("temperature", "subtalker_temperature"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi):
                raise ValueError(f"{name} must be a number in [{lo:g}, {hi:g}], got {v!r}")
        for name in ("top_p", "subtalker_top_p"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and 0 < v <= 1):
                raise ValueError(f"{name} must be in (0, 1], got {v!r}")
        for name in ("top_k", "subtalker_top_k"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise ValueError(f"{name} must be an integer >= 0 (0 disables it), got {v!r}")
        rp, (lo, hi) = self.repetition_penalty, REPETITION_PENALTY_RANGE
        if not (isinstance(rp, int | float) and not isinstance(rp, bool) and math.isfinite(rp) and lo <= rp <= hi):
            raise ValueError(f"repetition_penalty must be a number in [{lo:g}, {hi:g}], got {rp!r}")
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed < 2**63):
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        return self


def warp(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Temperature, top-k, top-p on fp32 logits [V]; filtered ids become -inf."""
    scores = logits / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k).values[-1]
        scores = scores.masked_fill(scores < kth, -math.inf)
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        drop = sorted_scores.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[-1] = False  # keep at least one
        scores = scores.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), -math.inf)
    return scores


def pick(scores: torch.Tensor, u: float) -> int:
    """Inverse CDF in id order over softmax(scores) [V] with the uniform `u` in [0, 1)."""
    cdf = scores.softmax(-1).cumsum(-1)
    target = torch.tensor([u * float(cdf[-1])], dtype=cdf.dtype, device=cdf.device)
    idx = int(torch.searchsorted(cdf, target, right=True))
    idx = min(idx, scores.shape[-1] - 1)
    # Never land on a filtered id (possible only through rounding at the edges of the CDF).
    while scores[idx] == -math.inf:
        idx -= 1
    return idx


def codebook0_logits(logits: torch.Tensor, generated: list[int], frame: int, params: SamplingParams,
                     eos_id: int, suppress: torch.Tensor) -> torch.Tensor:
    """Penalty, min-new-tokens and suppression on fp32 logits [V] for codebook 0 of `frame`."""
    scores = logits.clone()
    if params.repetition_penalty != 1.0 and generated:
        ids = torch.tensor(sorted(set(generated)), dtype=torch.long, device=scores.device)
        picked = scores[ids]
        scores[ids] = torch.where(picked < 0, picked * params.repetition_penalty,
                                  picked / params.repetition_penalty)
    if frame < params.min_new_tokens:
        scores[eos_id] = -math.inf
    return scores.masked_fill(suppress, -math.inf)


def pick_codebook0(logits: torch.Tensor, generated: list[int], frame: int, params: SamplingParams,
                   seed: int, eos_id: int, suppress: torch.Tensor) -> int:
    scores = codebook0_logits(logits, generated, frame, params, eos_id, suppress)
    if not params.do_sample:
        return int(scores.argmax())
    scores = warp(scores, params.temperature, params.top_k, params.top_p)
    return pick(scores, counter_uniform(seed, frame, 0))


def pick_codebook(logits: torch.Tensor, frame: int, codebook: int, params: SamplingParams, seed: int) -> int:
    """Codebooks 1..15: no penalty, no suppression."""
    if not params.subtalker_dosample:
        return int(logits.argmax())
    scores = warp(logits, params.subtalker_temperature, params.subtalker_top_k, params.subtalker_top_p)
    return pick(scores, counter_uniform(seed, frame, codebook))


def suppress_mask(vocab_size: int, eos_id: int) -> torch.Tensor:
    """Codebook 0 may only be a code (0..2047) or EOS: the reference suppresses the top 1024 ids
    (control, language and speaker ids) except EOS."""
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[vocab_size - 1024:] = True
    mask[eos_id] = False
    return mask
