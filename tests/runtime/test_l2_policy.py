"""The code predictor's L2 eviction priorities (`CodePredictorRunner.l2_policy`): which launch of its PDL passes gets
which of gemv's / cp_attention_o's `evict`, by product and layer (the heads by codebook). The kernels are stand-ins
that record it (PDL passes need an sm90 GPU); the hint itself is in the PTX (tests/bench/test_kernel_resources.py)
and changes no value (tests/kernels/test_gemv.py, test_cp_attention_o.py)."""

from __future__ import annotations

import pytest

from tests.runtime.recorded_frame import frame_launches, pdl_code_predictor
from tts_engine.runtime.code_predictor import CodePredictorRunner


@pytest.fixture(scope="module")
def runner() -> CodePredictorRunner:
    return pdl_code_predictor()


def launches(runner: CodePredictorRunner, monkeypatch, policy: dict) -> list[tuple[str, int, str]]:
    """One frame of one row through stand-in kernels (`frame_launches`) with `policy` -> (product, layer or codebook,
    its evict) in launch order, the attention + o launch named by its product, "o"."""
    runner.l2_policy = policy
    try:
        return [("o" if name == "attention_o" else name, i, kw.get("evict", ""))
                for name, i, kw in frame_launches(runner, monkeypatch)]
    finally:
        runner.l2_policy = {}


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

