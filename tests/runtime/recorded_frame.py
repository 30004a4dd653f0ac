"""A code predictor's frame through stand-in kernels that record how each launch was made, for the CPU tests of its
PDL passes' launch settings (test_early_trigger.py): those passes need an sm90 GPU, where
tests/gpu/test_code_predictor_gpu.py checks the codes they give."""

from __future__ import annotations

import torch

from tts_engine.checkpoint import random_model
from tts_engine.runtime import code_predictor as cp_module
from tts_engine.runtime import fused
from tts_engine.runtime.code_predictor import CodePredictorRunner
from tts_engine.runtime.options import FastPathOptions
from tts_engine.runtime.sampler import SamplingRows


def pdl_code_predictor() -> CodePredictorRunner:
    """A tiny random code predictor for 2 rows whose passes of 1-2 rows are PDL passes (qkv table, attention + o)."""
    _, model = random_model("tiny", torch.float32, "cpu", seed=0)
    talker = model.talker
    cp = CodePredictorRunner(talker, talker.model.codec_embedding.weight, 2, use_triton=True, pdl=True,
                             options=FastPathOptions(cp_gemv_rows=2, cp_qkv_table=True, cp_attention_o=True))
    assert cp.uses_pdl(1) and cp.uses_pdl(2), "the runner's passes of 1-2 rows are its PDL passes"
    return cp


def frame_launches(runner: CodePredictorRunner, monkeypatch) -> list[tuple[str, int, dict]]:
    """One frame of one row through stand-in kernels -> (launch, layer or codebook index, its keyword arguments) in
    launch order; launches: "qkv", "o", "gate_up", "down" (products), "attention_o", "head", "draw"."""
    names = {}
    for i, layer in enumerate(runner.stack.layers):
        names.update({layer.w_qkv.data_ptr(): ("qkv", i), layer.w_gate_up.data_ptr(): ("gate_up", i),
                      layer.w_down.data_ptr(): ("down", i), layer.w_o.data_ptr(): ("o", i)})
    for j in range(15):
        names[runner.heads[j].data_ptr()] = ("head", j)
    seen = []

    def gemv(x, w, *, silu_mul=False, **kw):
        seen.append((*names[w.data_ptr()], kw))
        return x.new_zeros(x.shape[0], w.shape[0] // 2 if silu_mul else w.shape[0])

    def attention_o(*a, **kw):
        seen.append(("attention_o", names[a[7].data_ptr()][1], kw))  # a[7]: its layer's w_o

    def draw(logits, out, **kw):
        seen.append(("draw", kw["codebook"] - 1, kw))
        out.zero_()

    monkeypatch.setattr(cp_module, "gemv", gemv)  # the head's
    monkeypatch.setattr(fused, "gemv", gemv)  # the layers'
    monkeypatch.setattr(cp_module, "cp_attention_o", attention_o)
    monkeypatch.setattr(cp_module, "sample_rows", draw)
    runner.predict(torch.zeros(1, runner.proj.in_features), torch.zeros(1, dtype=torch.long),
                   torch.zeros(1, dtype=torch.long), SamplingRows.empty(1, torch.device("cpu")))
    assert len([n for n, _, _ in seen if n == "draw"]) == 15
    return seen
