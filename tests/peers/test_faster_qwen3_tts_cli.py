"""faster-qwen3-tts needs CUDA, so on CPU its adapter is checked up to the load: arguments, what it
would load, the RoPE workaround; tests/gpu/test_peers_gpu.py runs the real thing."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest
import torch

from bench.peers import compat
from bench.peers import faster_qwen3_tts as adapter

REPO = Path(__file__).resolve().parents[2]


def exit_message(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        adapter.main([str(a) for a in argv])
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(("args", "words"), [
    (["--device", "cpu"], "needs a CUDA device"),
    (["--device", "cuda", "--chunk-size", "0"], "--chunk-size must be >= 1"),
    (["--device", "cuda", "--max-queue", "-1"], "--max-queue must be >= 0"),
    (["--device", "cuda", "--dtype", "int8"], "invalid choice"),
])
def test_bad_arguments_exit_2_with_one_line(tiny_checkpoint, capsys, args, words):
    assert words in exit_message(capsys, ["--model", tiny_checkpoint, *args])


def test_a_directory_without_a_checkpoint_is_refused(tmp_path, capsys):
    assert "no config.json there" in exit_message(capsys, ["--model", tmp_path, "--device", "cuda"])


def test_a_voice_design_checkpoint_is_refused(tiny_checkpoint, tmp_path, capsys):
    raw = json.loads((tiny_checkpoint / "config.json").read_text())  # only config.json is read before loading
    (tmp_path / "config.json").write_text(json.dumps({**raw, "tts_model_type": "voice_design"}))
    message = exit_message(capsys, ["--model", tmp_path, "--device", "cuda"])
    assert "serve CustomVoice checkpoints" in message


def test_defaults_reach_the_loader(tiny_checkpoint, monkeypatch):
    seen = {}
    monkeypatch.setattr(adapter, "serve", lambda args, name, load: seen.update(args=args, name=name))
    adapter.main(["--model", str(tiny_checkpoint), "--device", "cuda:0"])
    args = seen["args"]
    assert seen["name"] == "faster-qwen3-tts"
    assert (args.port, args.chunk_size, args.max_seq_len, args.attn, args.max_queue) == (8102, 8, 2048, "sdpa", 0)
    assert args.torch_dtype is torch.float32  # the checkpoint's own dtype on CUDA (tiny is fp32; 1.7b bf16)
    assert args.config.is_random and args.warmup


def test_the_replacement_rope_reads_either_config_layout():
    theta = 10000.0
    expected = 1.0 / theta ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16)
    old = types.SimpleNamespace(rope_theta=theta, head_dim=16)  # transformers 4 configs
    new = types.SimpleNamespace(rope_parameters={"rope_theta": theta}, head_dim=16)  # transformers 5 (Mimi)
    half = types.SimpleNamespace(rope_parameters={"rope_theta": theta, "partial_rotary_factor": 0.5},
                                 hidden_size=64, num_attention_heads=4)
    for cfg in (old, new):
        inv_freq, scale = compat._default_rope(cfg)
        assert scale == 1.0 and torch.allclose(inv_freq, expected)
    half_rotated = 1.0 / theta ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8)  # head_dim 16, half of it rotated
    assert torch.allclose(compat._default_rope(half)[0], half_rotated)


def test_only_qwen_tts_hfs_rope_entry_is_replaced(monkeypatch):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    def theirs(config, device=None):
        raise AttributeError("rope_theta")

    theirs.__module__ = "qwen_tts._transformers_compat"
    monkeypatch.setitem(ROPE_INIT_FUNCTIONS, "default", theirs)
    compat.fix_default_rope()
    assert ROPE_INIT_FUNCTIONS["default"] is compat._default_rope

    def someone_elses(config, device=None):
        return None

    monkeypatch.setitem(ROPE_INIT_FUNCTIONS, "default", someone_elses)
    compat.fix_default_rope()
    assert ROPE_INIT_FUNCTIONS["default"] is someone_elses


def test_wheels_script_and_docs_name_the_same_pins():
    script = (REPO / "bench/peers/wheels.sh").read_text()
    docs = (REPO / "docs/peers.md").read_text()
    pins = re.findall(r"[\w.-]+==[\w.]+", script)
    assert {"qwen-tts==0.1.1", "faster-qwen3-tts==0.5.4", "qwen-tts-hf==0.1.1.post1"} <= set(pins)
    assert [p for p in pins if p not in docs] == []

