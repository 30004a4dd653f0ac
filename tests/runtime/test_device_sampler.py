"""The device sampler (`runtime/sampler.py`) equals `sampling.py` row by row on CPU: the counter uniform bit for bit,
codebook 0 with its processors, the code predictor's codebooks, and the pick at a uniform within rounding of 1."""

from __future__ import annotations

import math

import pytest
import torch

from tts_engine import sampling as ref
from tts_engine.runtime import sampler as dev

V, EOS = 3072, 2150


# (seed, frame, codebook) whose uniform is within 2**-25 of 1 (found by search): u * total rounds
# up to the total in fp32, the edge case of inverse-CDF sampling.
NEAR_ONE = [(65552721, 0, 0), (86917819, 0, 0), (89915973, 0, 0), (757483, 3, 7), (34055740, 3, 7),
            (72247417, 3, 7)]


def test_device_counter_uniform_is_bit_identical_to_reference():
    g = torch.Generator().manual_seed(0)
    seeds = [0, 1, 2, 2**31 - 1, 2**32, 2**62, 2**63 - 2, 2**63 - 1,
             *torch.randint(0, 2**63 - 1, (40,), generator=g).tolist()]
    frames = [0, 1, 2, 7, 255, 2047, 2**31 - 1]
    triples = [(s, f, c) for s in seeds for f in frames for c in range(16)]
    s, f, c = (torch.tensor(col, dtype=torch.long) for col in zip(*triples))
    got = dev.counter_uniform(s, f, c).tolist()
    want = [ref.counter_uniform(*t) for t in triples]
    bad = [(t, a, b) for t, a, b in zip(triples, got, want) if a != b]
    assert not bad, f"{len(bad)} of {len(triples)} differ, e.g. (seed, frame, codebook, device, reference) {bad[:3]}"
    # The integer codebook form the runner uses gives the same uniforms.
    for cb in (0, 9, 15):
        rows = c == cb
        assert dev.counter_uniform(s[rows], f[rows], cb).tolist() == [w for w, t in zip(want, triples) if t[2] == cb]
    for seed, frame, cb in NEAR_ONE:
        assert 1 - ref.counter_uniform(seed, frame, cb) < 2**-25


def _rows(params: list[tuple[ref.SamplingParams, int]]) -> dev.SamplingRows:
    rows = dev.SamplingRows.empty(len(params), "cpu")
    for i, (p, seed) in enumerate(params):
        rows.set_row(i, p, seed)
    return rows


def _mixed_params() -> list[tuple[ref.SamplingParams, int]]:
    """Per-row settings: greedy and sampled, top-k 0/1/50, top-p 1.0/0.7, penalties, temperatures."""
    out = []
    for i, (do_sample, top_k, top_p, penalty, temperature) in enumerate([
        (False, 50, 1.0, 1.05, 0.9), (True, 50, 1.0, 1.05, 0.9), (True, 0, 1.0, 1.0, 1.0),
        (True, 1, 1.0, 1.05, 0.9), (True, 50, 0.7, 1.05, 0.9), (True, 0, 0.7, 1.3, 0.5),
        (False, 0, 0.7, 1.3, 1.5), (True, 50, 0.7, 0.8, 1.3), (True, 2048, 0.95, 1.1, 0.7),
        (True, 50, 1.0, 1.05, 0.9), (True, 0, 1.0, 1.0, 0.9), (True, 50, 1.0, 1.0, 0.9),
    ]):
        p = ref.SamplingParams(do_sample=do_sample, top_k=top_k, top_p=top_p, repetition_penalty=penalty,
                               temperature=temperature, subtalker_dosample=do_sample, subtalker_top_k=top_k,
                               subtalker_top_p=top_p, subtalker_temperature=temperature, min_new_tokens=2 + i % 3)
        out.append((p, 1000 + 7919 * i))
    return out


def test_device_codebook0_sampling_equals_reference_row_by_row():
    params = _mixed_params()
    near = [(ref.SamplingParams(top_k=k), seed) for seed, _, cb in NEAR_ONE if cb == 0 for k in (50, 0)]
    params += near
    b = len(params)
    g = torch.Generator().manual_seed(1)
    suppress = ref.suppress_mask(V, EOS)
    frames = [(3 * i) % 7 for i in range(len(params) - len(near))] + [0] * len(near)
    histories = [torch.randint(0, 2048, (f,), generator=g).tolist() for f in frames]
    # Penalised ids near the top so the penalty changes the outcome.
    logits = torch.randn(b, V, generator=g) * 3
    for i, h in enumerate(histories):
        logits[i, h] += 4.0
    logits[:, EOS] = 30.0  # EOS wins wherever it is not masked
    seen = torch.zeros(b, V, dtype=torch.bool)
    for i, h in enumerate(histories):
        seen[i, h] = True
    eos_allowed = torch.tensor([i % 4 != 1 for i in range(b)])
    got = dev.sample_codebook0(logits, seen, torch.tensor(frames), _rows(params), EOS, suppress, eos_allowed)
    for i, ((p, seed), frame, hist) in enumerate(zip(params, frames, histories)):
        row = logits[i].clone()
        if not eos_allowed[i]:
            row[EOS] = -math.inf
        want = ref.pick_codebook0(row, hist, frame, p, seed, EOS, suppress)
        assert int(got[i]) == want, f"row {i} ({p}, seed {seed}, frame {frame}): device {int(got[i])} != {want}"
        assert int(got[i]) < 2048 or int(got[i]) == EOS, f"row {i}: suppressed id {int(got[i])}"
    assert any(int(x) == EOS for x in got) and any(int(x) != EOS for x in got)


@pytest.mark.parametrize("codebook", [1, 7, 15])
def test_device_codebook_sampling_equals_reference_row_by_row(codebook):
    near = [(seed, frame) for seed, frame, cb in NEAR_ONE if cb == 7]
    params = _mixed_params() + [(ref.SamplingParams(), seed) for seed, _ in near]
    b = len(params)
    g = torch.Generator().manual_seed(codebook)
    logits = torch.randn(b, 2048, generator=g) * 2
    frames = torch.tensor([(5 * i) % 11 for i in range(b - len(near))] + [f for _, f in near])
    got = dev.sample_codebook(logits, frames, codebook, _rows(params))
    for i, (p, seed) in enumerate(params):
        want = ref.pick_codebook(logits[i], int(frames[i]), codebook, p, seed)
        assert int(got[i]) == want, f"row {i} ({p}, seed {seed}): device {int(got[i])} != {want}"


def test_device_pick_with_uniform_near_one_lands_on_the_last_unfiltered_id():
    """u * total rounds up to the total: the reference steps back to the last kept id."""
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(3, 2048, generator=g)
    scores[0, 1000:] = -math.inf
    scores[1] = ref.warp(scores[1], 0.9, 50, 1.0)
    scores[2, 2047] = -math.inf
    u = torch.tensor([1 - 2.0**-40, 1 - 2.0**-30, 1 - 2.0**-53], dtype=torch.float64)
    got = dev.pick(scores, u).tolist()
    want = [ref.pick(scores[i], float(u[i])) for i in range(3)]
    assert got == want
    assert all(scores[i, got[i]] > -math.inf for i in range(3))
