"""Checkpoint loading by official names: single file, shards, dtype, and errors naming tensors."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from tts_engine.checkpoint import random_talker_state_dict
from tts_engine.config import CONFIG_DIR, ModelConfig
from tts_engine.model.qwen3_tts import Qwen3TTS
from tts_engine.weights import CheckpointError, load_into, safetensors_files

CFG = ModelConfig.from_file(CONFIG_DIR / "tiny-customvoice.config.json")


def _meta_model():
    with torch.device("meta"):
        return Qwen3TTS(CFG)


def _state():
    return random_talker_state_dict(CFG, seed=3, dtype=torch.float32)


def test_sharded_checkpoint_loads_like_a_single_file(tmp_path):
    state = _state()
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(tmp_path / file))
    index = {"metadata": {}, "weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    model = load_into(_meta_model(), safetensors_files(tmp_path), dtype=torch.bfloat16)
    for k, v in model.state_dict().items():
        assert v.dtype == torch.bfloat16
        assert torch.equal(v, state[k].to(torch.bfloat16))


def test_missing_unexpected_and_misshaped_tensors_are_all_named(tmp_path):
    state = _state()
    del state["talker.codec_head.weight"]
    del state["talker.model.layers.1.mlp.up_proj.weight"]
    state["talker.extra.weight"] = torch.zeros(2)
    state["talker.model.norm.weight"] = torch.ones(7)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_into(_meta_model(), safetensors_files(tmp_path))
    msg = str(err.value)
    for name in ("missing: talker.codec_head.weight", "missing: talker.model.layers.1.mlp.up_proj.weight",
                 "unexpected: talker.extra.weight", "shape: talker.model.norm.weight"):
        assert name in msg


def test_directory_without_weights_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match=r"no model\.safetensors"):
        safetensors_files(tmp_path)


def test_loading_reports_progress_as_log_lines_or_a_bar(tiny_checkpoint, caplog, capsys):
    import logging

    from tts_engine.loading import load_checkpoint

    with caplog.at_level(logging.INFO, logger="tts_engine.loading"):
        load_checkpoint(tiny_checkpoint, progress_bar=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "tts_engine.loading"]
    assert [line.split(":")[0] for line in lines] == ["loaded talker", "loaded codec decoder"]
    talker_mb = sum(f.stat().st_size for f in tiny_checkpoint.glob("*.safetensors")) / 1e6
    assert float(lines[0].split(": ")[1].split(" MB")[0]) == pytest.approx(talker_mb, abs=0.15)
    load_checkpoint(tiny_checkpoint, progress_bar=True)
    err = capsys.readouterr().err
    assert "loading model" in err and "100%" in err


def test_loaded_weights_need_no_gradients_so_pointwise_convs_copy_nothing(tiny_checkpoint):
    """A weight requiring grad makes the codec's pointwise-conv GEMM (matmul of [N, K] by [B, K, T]) copy its
    input transposed and its output: on the GPU those copies were half a large codec call's kernel time."""
    from tts_engine.loading import load_checkpoint

    ckpt = load_checkpoint(tiny_checkpoint, progress_bar=False)
    params = [*ckpt.model.parameters(), *ckpt.codec.parameters()]
    assert params and not any(p.requires_grad for p in params)
    codec = ckpt.codec.use_fused_kernels()
    conv = codec.decoder[1].block[2].conv2  # a residual unit's pointwise conv, a GEMM on the fast path
    x = torch.randn(2, conv.conv.in_channels, 64)
    with torch.inference_mode(), torch.profiler.profile() as prof:
        y = conv(x)
    copies = [e.name for e in prof.events() if e.name in ("aten::copy_", "aten::clone", "aten::contiguous")]
    assert copies == []
    torch.testing.assert_close(y, torch.nn.functional.conv1d(x, conv.conv.weight, conv.conv.bias))
    conv.conv.weight.requires_grad_(True)  # the test can fail: the same product with a weight that needs grad
    with torch.inference_mode(), torch.profiler.profile() as prof:
        conv(x)
    assert [e.name for e in prof.events() if e.name == "aten::copy_"]
