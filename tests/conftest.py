"""Shared fixtures: random-weight checkpoints in the official layout, built once per session."""

from __future__ import annotations

import os

import pytest
import torch

# Parity tests instantiate the official package from local directories only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Without a GPU, Triton kernels run on CPU tensors through Triton's interpreter, which Triton
# switches on when a kernel is defined (at first import): set it before any test imports one.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from tts_engine.checkpoint import make_checkpoint

    return make_checkpoint("tiny", tmp_path_factory.mktemp("tiny-customvoice"), seed=1)


@pytest.fixture(scope="session")
def tiny_voice_design_checkpoint(tmp_path_factory):
    from tts_engine.checkpoint import make_checkpoint

    return make_checkpoint("tiny", tmp_path_factory.mktemp("tiny-voicedesign"), seed=2,
                           variant="voice_design")


@pytest.fixture(scope="session")
def official():
    """Import the official qwen-tts package (with stand-ins for its audio-I/O imports)."""
    from tests.official import install_import_stubs, official_available

    if not official_available():
        pytest.fail("qwen-tts and transformers==4.57.3 must be installed for parity tests "
                    "(see README: the test command installs them)")
    install_import_stubs()
    import qwen_tts

    return qwen_tts
