"""The fast sampler variant (top-k through torch.topk, no top-p sort) gives the general sampler's and
`sampling.py`'s ids on every row it claims to serve; the runner picks it only when it serves the
whole batch; drawing all 16 uniforms of a frame at once changes nothing."""

from __future__ import annotations

import math

import pytest
import torch

from tts_engine import sampling as ref
from tts_engine.runtime import sampler as dev

V0, V, EOS = 3072, 2048, 2150

SERVED = [  # (do_sample, top_k, temperature): top-k off, small, at the limit, off by size
    (True, 50, 0.9), (True, 0, 1.0), (True, 1, 0.9), (True, dev.TOP_K_MAX, 1.3), (True, 4096, 0.7),
    (False, 50, 0.9), (True, 2, 0.5), (True, 17, 1.1),
]


def _rows(params):
    rows = dev.SamplingRows.empty(len(params), "cpu")
    for i, (p, seed) in enumerate(params):
        rows.set_row(i, p, seed)
    return rows


def _served_params():
    out = []
    for i, (do_sample, top_k, temperature) in enumerate(SERVED * 2):
        p = ref.SamplingParams(do_sample=do_sample, top_k=top_k, temperature=temperature, repetition_penalty=1.1,
                               subtalker_dosample=do_sample, subtalker_top_k=top_k,
                               subtalker_temperature=temperature, min_new_tokens=i % 3)
        out.append((p, 77 + 1009 * i))
    return out


def test_serves_only_settings_whose_ids_it_reproduces():
    fast = dev.FAST
    assert fast.serves(ref.SamplingParams(), V0, V)  # the defaults: top-k 50, top-p 1
    assert fast.serves(ref.SamplingParams(top_k=0, subtalker_top_k=V), V0, V)
    assert not fast.serves(ref.SamplingParams(top_k=dev.TOP_K_MAX + 1), V0, V)
    assert not fast.serves(ref.SamplingParams(subtalker_top_k=dev.TOP_K_MAX + 1), V0, V)
    assert not fast.serves(ref.SamplingParams(top_p=0.9), V0, V)
    assert not fast.serves(ref.SamplingParams(subtalker_top_p=0.99), V0, V)
    assert dev.GENERAL.serves(ref.SamplingParams(top_k=1000, top_p=0.5), V0, V)


@pytest.mark.parametrize("seed", range(3))
def test_fast_variant_codebook0_equals_general_and_reference(seed):
    params = _served_params()
    b = len(params)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, V0, generator=g) * 3
    logits[:, 100:140] += 2.0  # a cluster of near-ties around the top-k threshold
    frames = torch.tensor([(seed + i) % 5 for i in range(b)])
    histories = [torch.randint(0, 2048, (int(f),), generator=g).tolist() for f in frames]
    seen = torch.zeros(b, V0, dtype=torch.bool)
    for i, h in enumerate(histories):
        seen[i, h] = True
    suppress = ref.suppress_mask(V0, EOS)
    eos_allowed = torch.ones(b, dtype=torch.bool)
    rows = _rows(params)
    u = dev.counter_uniform(rows.seed[:, None], frames[:, None], torch.arange(16))[:, 0]
    general = dev.sample_codebook0(logits, seen, frames, rows, EOS, suppress, eos_allowed)
    fast = dev.sample_codebook0(logits, seen, frames, rows, EOS, suppress, eos_allowed, u=u, variant=dev.FAST)
    assert torch.equal(fast, general)
    for i, (p, s) in enumerate(params):
        assert int(fast[i]) == ref.pick_codebook0(logits[i], histories[i], int(frames[i]), p, s, EOS, suppress)


@pytest.mark.parametrize("codebook", [1, 9, 15])
def test_fast_variant_codebooks_equal_general_and_reference(codebook):
    params = _served_params()
    b = len(params)
    g = torch.Generator().manual_seed(100 + codebook)
    logits = torch.randn(b, V, generator=g) * 2
    logits[:, :64] = logits[:, :64].round()  # exact ties at the threshold
    frames = torch.tensor([(3 * i) % 7 for i in range(b)])
    rows = _rows(params)
    u_all = dev.counter_uniform(rows.seed[:, None], frames[:, None], torch.arange(16))  # [B, 16]
    warp_rows = dev.WarpRows.of(rows.sub_temperature, rows.sub_top_k, rows.sub_top_p, V, dev.FAST)
    fast = dev.sample_codebook(logits, frames, codebook, rows, u=u_all[:, codebook], variant=dev.FAST,
                               warp_rows=warp_rows)
    general = dev.sample_codebook(logits, frames, codebook, rows)
    assert torch.equal(fast, general)
    for i, (p, s) in enumerate(params):
        assert int(fast[i]) == ref.pick_codebook(logits[i], int(frames[i]), codebook, p, s)


def test_fast_warp_masks_exactly_what_the_sorting_warp_masks():
    g = torch.Generator().manual_seed(4)
    scores = torch.randn(6, V, generator=g).round(decimals=1)  # many ties
    temperature = torch.tensor([0.9, 1.0, 1.3, 0.7, 1.0, 0.5])
    top_k = torch.tensor([50, 0, dev.TOP_K_MAX, 1, V, 3])
    top_p = torch.ones(6)
    fast = dev.warp(scores, temperature, top_k, top_p, dev.FAST)
    general = dev.warp(scores, temperature, top_k, top_p)
    assert torch.equal(fast, general)
    assert (fast[3] > -math.inf).sum() >= 1


def test_frame_uniforms_drawn_at_once_equal_one_codebook_at_a_time():
    seeds = torch.tensor([0, 5, 2**63 - 1, 2**40 + 3])
    frames = torch.tensor([0, 9, 100, 2**31 - 1])
    at_once = dev.counter_uniform(seeds[:, None], frames[:, None], torch.arange(16))
    for cb in range(16):
        assert torch.equal(at_once[:, cb], dev.counter_uniform(seeds, frames, cb))


def test_runner_picks_the_fast_variant_only_when_it_serves_every_row(tiny_checkpoint):
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.synthesizer import Synthesizer

    runner = ModelRunner(Synthesizer(tiny_checkpoint).model, max_slots=4, max_context=32, use_triton=False,
                         use_graphs=False)
    picked = []
    runner._frame_codes = lambda *args: picked.append(args[-1]) or torch.zeros(len(args[0]), 16, dtype=torch.long)
    runner._frame_feed = lambda *args: None
    runner.start_slot(0, ref.SamplingParams(), 1, eos_allowed=True)
    runner.start_slot(1, ref.SamplingParams(top_p=0.8), 2, eos_allowed=True)
    runner.frame_step([0], [0], [5], [0])
    runner.frame_step([0, 1], [0, 0], [5, 5], [0, 0])
    runner.start_slot(1, ref.SamplingParams(subtalker_top_k=dev.TOP_K_MAX), 3, eos_allowed=True)  # slot reused
    runner.frame_step([1, 0], [0, 0], [5, 5], [0, 0])
    assert picked == [dev.FAST, dev.GENERAL, dev.FAST]
