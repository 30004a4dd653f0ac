"""The code predictor's L2 eviction priorities (`CodePredictorRunner.l2_policy`): which launch of its PDL passes gets
which of gemv's / cp_attention_o's `evict`, by product and layer (the heads by codebook). The kernels are stand-ins
that record it (PDL passes need an sm90 GPU); the hint itself is in the PTX (tests/bench/test_kernel_resources.py)
and changes no value (tests/kernels/test_gemv.py, test_cp_attention_o.py)."""

from __future__ import annotations

import pytest
import torch

from tts_engine.checkpoint import random_model
from tts_engine.runtime import code_predictor as cp_module
from tts_engine.runtime import fused
from tts_engine.runtime.code_predictor import CodePredictorRunner
from tts_engine.runtime.sampler import SamplingRows


@pytest.fixture(scope="module")
def runner() -> CodePredictorRunner:
    _, model = random_model("tiny", torch.float32, "cpu", seed=0)
    talker = model.talker
    return CodePredictorRunner(talker, talker.model.codec_embedding.weight, 2, use_triton=True, gemv_rows=2, pdl=True,
                               qkv_table=True, attention_o=True)


def launches(runner: CodePredictorRunner, monkeypatch, policy: dict) -> list[tuple[str, int, str]]:
    """One frame of one row through stand-in kernels -> (product, layer or codebook, its evict) in launch order."""
    names = {}
    for i, layer in enumerate(runner.stack.layers):
        names.update({layer.w_qkv.data_ptr(): ("qkv", i), layer.w_gate_up.data_ptr(): ("gate_up", i),
                      layer.w_down.data_ptr(): ("down", i), layer.w_o.data_ptr(): ("o", i)})
    for j in range(15):
        names[runner.heads[j].data_ptr()] = ("head", j)
    seen = []

    def gemv(x, w, *, silu_mul=False, evict="", **_):
        seen.append((*names[w.data_ptr()], evict))
        return x.new_zeros(x.shape[0], w.shape[0] // 2 if silu_mul else w.shape[0])

    def attention_o(*a, evict="", **_):
        seen.append((*names[a[7].data_ptr()], evict))

    def draw(logits, out, **_):
        out.zero_()

    monkeypatch.setattr(cp_module, "gemv", gemv)
    monkeypatch.setattr(fused, "gemv", gemv)
    monkeypatch.setattr(cp_module, "cp_attention_o", attention_o)
    monkeypatch.setattr(cp_module, "sample_rows", draw)
    runner.l2_policy = policy
    try:
        runner.predict(torch.zeros(1, runner.proj.in_features), torch.zeros(1, dtype=torch.long),
                       torch.zeros(1, dtype=torch.long), SamplingRows.empty(1, torch.device("cpu")))
    finally:
        runner.l2_policy = {}
    return seen


def test_without_a_policy_no_launch_gets_a_hint(runner, monkeypatch):
    seen = launches(runner, monkeypatch, {})
    assert {evict for *_, evict in seen} == {""}
    assert [(p, i) for p, i, _ in seen].count(("o", 1)) == 15  # every pass, the prefill's too


def test_each_product_of_each_layer_and_each_head_gets_its_own_priority(runner, monkeypatch):
    policy = {("gate_up", 0): "evict_last", ("o", 1): "evict_first", ("qkv", 1): "evict_first",
              ("down", 0): "evict_last", ("head", 3): "evict_last"}
    seen = launches(runner, monkeypatch, policy)
    for product, i, evict in seen:
        assert evict == policy.get((product, i), ""), (product, i)
    hinted = [(p, i) for p, i, e in seen if e]
    assert hinted.count(("gate_up", 0)) == hinted.count(("o", 1)) == hinted.count(("qkv", 1)) == 15
    assert hinted.count(("head", 3)) == 1
    assert len(runner.stack.layers) == 2, "the tiny stack has the layers the policy names"

