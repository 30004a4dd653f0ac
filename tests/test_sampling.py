"""Sampling equals the reference's logits processors; randomness is keyed by (seed, frame, codebook)."""

from __future__ import annotations

import math

import pytest
import torch

from tts_engine.sampling import (
    SamplingParams,
    codebook0_logits,
    counter_uniform,
    pick,
    pick_codebook,
    pick_codebook0,
    suppress_mask,
    warp,
)

V, EOS = 3072, 2150


def _hf_processors(official, params: SamplingParams, do_sample: bool):
    from transformers.generation import logits_process as lp

    procs = [lp.RepetitionPenaltyLogitsProcessor(params.repetition_penalty),
             lp.MinNewTokensLengthLogitsProcessor(0, params.min_new_tokens, EOS),
             lp.SuppressTokensLogitsProcessor([i for i in range(V - 1024, V) if i != EOS])]
    if do_sample:
        procs += [lp.TemperatureLogitsWarper(params.temperature), lp.TopKLogitsWarper(params.top_k)]
        if params.top_p < 1.0:
            procs.append(lp.TopPLogitsWarper(params.top_p))
    return lp.LogitsProcessorList(procs)


@pytest.mark.parametrize("top_p", [1.0, 0.8])
@pytest.mark.parametrize("frame", [0, 1, 5])
def test_codebook0_processing_equals_hf_processors(official, frame, top_p):
    g = torch.Generator().manual_seed(frame)
    logits = torch.randn(V, generator=g) * 3
    logits[EOS] = 10.0  # EOS would win if not masked
    generated = torch.randint(0, 2048, (frame,), generator=g).tolist()
    params = SamplingParams(top_p=top_p)
    ours = warp(codebook0_logits(logits, generated, frame, params, EOS, suppress_mask(V, EOS)),
                params.temperature, params.top_k, params.top_p)
    ids = torch.tensor([generated], dtype=torch.long)
    theirs = _hf_processors(official, params, True)(ids, logits[None].clone())[0]
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
    finite = ~torch.isinf(ours)
    torch.testing.assert_close(ours[finite], theirs[finite])
    assert (frame < 2) == math.isinf(ours[EOS])


def test_greedy_codebook0_is_argmax_after_penalty_and_suppression(official):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(V, generator=g)
    generated = [int(logits[:2048].argmax())]
    params = SamplingParams.greedy()
    theirs = _hf_processors(official, params, False)(torch.tensor([generated]), logits[None].clone())[0]
    assert pick_codebook0(logits, generated, 3, params, 0, EOS, suppress_mask(V, EOS)) == int(theirs.argmax())


def test_counter_uniform_is_deterministic_and_keyed():
    us = {counter_uniform(7, f, c) for f in range(50) for c in range(16)}
    assert len(us) == 800
    assert all(0 <= u < 1 for u in us)
    assert counter_uniform(7, 3, 4) == counter_uniform(7, 3, 4) != counter_uniform(8, 3, 4)
    mean = sum(us) / len(us)
    assert abs(mean - 0.5) < 0.05


def test_pick_follows_the_distribution():
    scores = torch.tensor([0.0, math.log(3.0), -math.inf, 0.0])  # probs 0.2, 0.6, 0, 0.2
    counts = [0, 0, 0, 0]
    for f in range(4000):
        counts[pick(scores, counter_uniform(1, f, 0))] += 1
    assert counts[2] == 0
    assert abs(counts[1] / 4000 - 0.6) < 0.03
    assert abs(counts[0] / 4000 - 0.2) < 0.03


def test_seeded_sampling_repeats_and_seeds_differ():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2048, generator=g)
    params = SamplingParams(seed=5)
    a = [pick_codebook(logits, f, 3, params, 5) for f in range(30)]
    b = [pick_codebook(logits, f, 3, params, 5) for f in range(30)]
    c = [pick_codebook(logits, f, 3, params, 6) for f in range(30)]
    assert a == b != c
    top50 = set(torch.topk(logits / 0.9, 50).indices.tolist())
    assert set(a) <= top50


@pytest.mark.parametrize("bad", [
    {"temperature": 0}, {"temperature": float("nan")}, {"top_p": 0}, {"top_p": 1.5}, {"top_k": -1},
    {"top_k": 2.5}, {"repetition_penalty": 0}, {"seed": -1}, {"subtalker_temperature": -1.0},
])
def test_bad_sampling_values_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad).validate()
