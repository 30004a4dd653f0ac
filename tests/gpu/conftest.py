"""GPU tests: run on the GPU machine with `python -m pytest -m gpu tests/gpu`. CI deselects them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


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


def random_model(size: str, dtype: torch.dtype, device, seed: int = 0):
    """Qwen3TTS with random weights built directly on the device (no checkpoint on disk)."""
    from tts_engine.checkpoint import SIZES, random_talker_state_dict
    from tts_engine.config import CONFIG_DIR, ModelConfig
    from tts_engine.model.qwen3_tts import Qwen3TTS

    cfg = ModelConfig.from_file(CONFIG_DIR / SIZES[size][0])
    with torch.device("meta"):
        model = Qwen3TTS(cfg)
    model.load_state_dict(random_talker_state_dict(cfg, seed, dtype, device), assign=True)
    return cfg, model.eval()
