"""bench.grid_barrier on the GPU: every variant of the chain, the persistent ones with all programs
resident and spinning on one counter, computes the torch chain (each round reads other programs'
outputs of the round before, so a barrier that let a program through early gives another chain), and
each barrier counted every program once."""

from __future__ import annotations

import math

import pytest
import torch

from bench.grid_barrier import VARIANTS, block_n_for, chain_ref, run_chain
from tts_engine.kernels.backend import pdl_supported


@pytest.mark.parametrize("d,variant", [(1024, v) for v in VARIANTS] + [(2048, "persistent_early")])
def test_chain_on_the_gpu_equals_torch(cuda, d, variant):
    if variant == "launch_pdl" and not pdl_supported(cuda):
        pytest.skip("programmatic dependent launch needs sm90+")
    sms = torch.cuda.get_device_properties(cuda).multi_processor_count
    g = torch.Generator(device="cuda").manual_seed(d)
    rounds, n_mats = 12, 5
    w = torch.randn(n_mats, d, d, device="cuda", generator=g).bfloat16()
    y = torch.zeros(rounds + 1, d, device="cuda")
    y[0] = torch.randn(d, device="cuda", generator=g)
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    scale = 1.0 / math.sqrt(d)
    block_n = block_n_for(d, sms)
    for _ in range(3):  # the same chain again from a zeroed counter: no state carried between launches
        y[1:] = float("nan")
        run_chain(variant, w, y, counter, rounds, sms, scale, num_warps=8 if d >= 2048 else 4)
        torch.cuda.synchronize()
        ref = chain_ref(variant, w, y[0], rounds, scale, block_n)
        assert ((y[rounds] - ref).norm() / ref.norm()).item() < 1e-4
        if variant != "launch" and variant != "launch_pdl":
            assert counter.item() == (rounds - 1) * math.ceil(d / block_n)
