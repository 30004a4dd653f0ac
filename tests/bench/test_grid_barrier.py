"""bench.grid_barrier's chain kernel under Triton's interpreter: every variant computes the torch chain.
The interpreter runs programs one after another, so a persistent launch here has one program (a
barrier among several would never open); tests/gpu/test_grid_barrier_gpu.py runs them as timed."""

from __future__ import annotations

import math

import pytest
import torch

from bench.grid_barrier import VARIANTS, block_n_for, chain_ref, run_chain
from tts_engine.kernels.backend import runs_on

pytestmark = pytest.mark.skipif(not runs_on(torch.device("cpu")), reason="needs Triton's interpreter")


def _chain(d=48, n_mats=3, rounds=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n_mats, d, d, generator=g).bfloat16()
    y = torch.zeros(rounds + 1, d)
    y[0] = torch.randn(d, generator=g)
    return w, y, torch.zeros(1, dtype=torch.int32), 1.0 / math.sqrt(d)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "launch_pdl"])
def test_every_variant_computes_the_chain(variant):
    w, y, counter, scale = _chain()
    rounds = y.shape[0] - 1
    programs = 4 if variant == "launch" else 1  # launch: 3 programs of 16 features; persistent: one of 64
    run_chain(variant, w, y, counter, rounds, programs, scale, block_k=16)
    ref = chain_ref(variant, w, y[0], rounds, scale, block_n_for(48, programs))
    torch.testing.assert_close(y[rounds], ref, rtol=1e-4, atol=1e-4)
    if variant != "launch":  # one arrival a program at each barrier (before every round but the first)
        assert counter.item() == rounds - 1


def test_a_round_reads_the_previous_rounds_output():
    """A chain whose rounds each read y_0 instead of y_r differs: the reference is not trivially met."""
    w, y, counter, scale = _chain(seed=1)
    run_chain("persistent", w, y, counter, 4, 1, scale, block_k=16)
    one_round = scale * (w[3 % w.shape[0]].float() @ y[0])
    assert (y[4] - one_round).abs().max() > 1e-2


def test_block_n_fits_the_programs():
    assert block_n_for(2048, 132) == 16 and math.ceil(2048 / 16) <= 132
    assert block_n_for(3072, 132) == 32 and math.ceil(3072 / 32) <= 132
    assert block_n_for(48, 1) == 64
    with pytest.raises(ValueError, match="variant"):
        run_chain("fast", *_chain()[:3], 1, 1, 1.0)
