"""The code predictor's early triggers (`CodePredictorRunner.early_trigger`): which launches of its PDL passes get
`backend.PDL_EARLY` (the next launch may start before their wait) and which keep triggering after it. The kernels
are stand-ins that record what they were launched with: PDL needs an sm90 GPU, where
tests/gpu/test_code_predictor_gpu.py checks that early triggers give the codes of late ones."""

from __future__ import annotations

import pytest
import torch

from tts_engine.checkpoint import random_model
from tts_engine.kernels.backend import PDL_EARLY
from tts_engine.runtime import code_predictor as cp_module
from tts_engine.runtime import fused
from tts_engine.runtime.code_predictor import EARLY_TRIGGER_LAUNCHES, CodePredictorRunner
from tts_engine.runtime.sampler import SamplingRows


@pytest.fixture(scope="module")
def runner() -> CodePredictorRunner:
    _, model = random_model("tiny", torch.float32, "cpu", seed=0)
    talker = model.talker
    cp = CodePredictorRunner(talker, talker.model.codec_embedding.weight, 2, use_triton=True, gemv_rows=2, pdl=True,
                             qkv_table=True, attention_o=True)
    assert cp.uses_pdl(1) and cp.uses_pdl(2), "the runner's passes of 1-2 rows are its PDL passes"
    return cp


def launches(runner: CodePredictorRunner, monkeypatch, early: tuple[str, ...]) -> list[tuple[str, object]]:
    """One frame of one row through stand-in kernels -> (launch, its pdl) in launch order."""
    stack = runner.stack
    names = {}
    for layer in stack.layers:
        names.update({layer.w_qkv.data_ptr(): "qkv", layer.w_gate_up.data_ptr(): "gate_up",
                      layer.w_down.data_ptr(): "down"})
    for j in range(15):
        names[runner.heads[j].data_ptr()] = "head"
    seen = []

    def gemv(x, w, *, silu_mul=False, pdl=False, **_):
        seen.append((names[w.data_ptr()], pdl))
        return x.new_zeros(x.shape[0], w.shape[0] // 2 if silu_mul else w.shape[0])

    def attention_o(*a, pdl=False, **_):
        seen.append(("attention_o", pdl))

    def draw(logits, out, *, pdl=False, **_):
        seen.append(("draw", pdl))
        out.zero_()

    monkeypatch.setattr(cp_module, "gemv", gemv)  # the head's
    monkeypatch.setattr(fused, "gemv", gemv)  # the layers'
    monkeypatch.setattr(cp_module, "cp_attention_o", attention_o)
    monkeypatch.setattr(cp_module, "sample_rows", draw)
    runner.early_trigger = early
    try:
        runner.predict(torch.zeros(1, runner.proj.in_features), torch.zeros(1, dtype=torch.long),
                       torch.zeros(1, dtype=torch.long), SamplingRows.empty(1, torch.device("cpu")))
    finally:
        runner.early_trigger = ()
    assert len([n for n, _ in seen if n == "draw"]) == 15
    return seen


def test_without_early_triggers_every_launch_triggers_after_its_wait(runner, monkeypatch):
    seen = launches(runner, monkeypatch, ())
    assert {pdl for _, pdl in seen} == {True}
    layers = len(runner.stack.layers)
    # the prefill pass makes its first layer's qkv; passes 1-14 gather it from the table
    assert [n for n, _ in seen].count("qkv") == 15 * layers - 14


def test_early_triggers_are_the_named_launches_but_the_frames_last_draw(runner, monkeypatch):
    seen = launches(runner, monkeypatch, EARLY_TRIGGER_LAUNCHES)
    draws = [pdl for n, pdl in seen if n == "draw"]
    assert draws == [PDL_EARLY] * 14 + [True], "the frame's last draw is followed by what is not the code predictor's"
    assert {pdl for n, pdl in seen if n in ("qkv", "attention_o", "down", "head")} == {PDL_EARLY}
    assert {pdl for n, pdl in seen if n == "gate_up"} == {True}
    only_down = launches(runner, monkeypatch, ("down",))
    assert [(n, pdl == PDL_EARLY) for n, pdl in only_down] == [(n, n == "down") for n, _ in only_down]


def test_an_unknown_or_unsafe_launch_is_refused_and_non_pdl_launches_are_left_alone(runner):
    runner.early_trigger = ("gate_up",)
    try:
        with pytest.raises(ValueError, match="gate_up"):
            runner.trigger("down", True)
        runner.early_trigger = ("down",)
        assert runner.trigger("down", False) is False
        assert runner.trigger("down", True) == PDL_EARLY and runner.trigger("head", True) is True
        assert runner.launch(2)["down"]["pdl"] == PDL_EARLY and runner.launch(2)["gate_up"]["pdl"] is True
    finally:
        runner.early_trigger = ()
