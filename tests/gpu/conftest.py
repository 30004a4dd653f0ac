"""GPU tests: run on the GPU machine with `python -m pytest -m gpu tests/gpu`. CI deselects them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tts_engine.checkpoint import random_model
from tts_engine.runtime.runner import ModelRunner
from tts_engine.sampling import SamplingParams


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cuda():
    if not torch.cuda.is_available():
        pytest.fail("GPU tests need a CUDA device (deselect them with -m 'not gpu')")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.device("cuda")


@pytest.fixture(scope="session")
def triton_model(cuda):
    """The 1.7B config in bf16, random weights (seed 3), for the Triton-path tests (tests/gpu/test_triton_path_gpu.py,
    tests/gpu/test_code_predictor_gpu.py)."""
    return random_model("1.7b", torch.bfloat16, cuda, seed=3)


@pytest.fixture(scope="session")
def runners(triton_model):
    """(config, [a Triton runner, a torch runner]) on triton_model, 8 slots prefilled to the same state."""
    cfg, model = triton_model
    pair = [ModelRunner(model, max_slots=8, max_context=256, use_triton=t, use_graphs=False) for t in (True, False)]
    g = torch.Generator(device="cuda").manual_seed(0)
    for slot in range(8):
        x = torch.randn(20 + 9 * slot, cfg.talker.hidden_size, device="cuda", generator=g).bfloat16()
        for r in pair:
            r.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
            r.prefill(slot, x)
    # The two prefills differ by bf16 rounding over 28 layers (the Triton one runs the prompt as
    # decode queries; tests/runtime compares them in fp32): the step tests below start both paths
    # from the same state, so they measure the step alone.
    fast, ref = pair
    for name in ("k_cache", "v_cache", "hidden", "logits"):
        getattr(ref, name).copy_(getattr(fast, name))
    return cfg, pair
