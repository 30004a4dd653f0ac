"""Our modules carry exactly the official tensor names and shapes (no weights needed)."""

from __future__ import annotations

import json

import pytest
import torch

from tts_engine.config import CONFIG_DIR, ModelConfig
from tts_engine.model.qwen3_tts import Qwen3TTS


def _our_shapes(raw: dict) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = Qwen3TTS(ModelConfig.from_dict(raw))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


@pytest.mark.parametrize(("config", "count"), [("1.7b-customvoice", 404), ("0.6b-customvoice", 402)])
def test_real_configs_give_official_tensor_count(config, count):
    raw = json.loads((CONFIG_DIR / f"{config}.config.json").read_text())
    assert len(_our_shapes(raw)) == count


@pytest.mark.parametrize("config", ["1.7b-customvoice", "0.6b-customvoice", "tiny-customvoice"])
def test_tensor_names_and_shapes_equal_official(config, official):
    raw = json.loads((CONFIG_DIR / f"{config}.config.json").read_text())
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    with torch.device("meta"):
        ref = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**raw))
    assert _our_shapes(raw) == {k: tuple(v.shape) for k, v in ref.state_dict().items()}


def test_0_6b_has_no_projection_and_1_7b_has_one():
    names = {}
    for config in ("1.7b-customvoice", "0.6b-customvoice"):
        raw = json.loads((CONFIG_DIR / f"{config}.config.json").read_text())
        names[config] = set(_our_shapes(raw))
    proj = {"talker.code_predictor.small_to_mtp_projection.weight",
            "talker.code_predictor.small_to_mtp_projection.bias"}
    assert proj <= names["1.7b-customvoice"]
    assert not proj & names["0.6b-customvoice"]
