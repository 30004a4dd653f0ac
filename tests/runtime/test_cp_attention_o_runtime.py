"""The code predictor with its attention inside the o product (`attention_o`, batch 1) gives the hidden
states and K/V of the two-launch path, through the Triton interpreter on the tiny model: the two
prefill positions, then one-position steps, and predict()'s codes."""

from __future__ import annotations

import torch

from tts_engine.checkpoint import random_model
from tts_engine.runtime.code_predictor import CodePredictorRunner
from tts_engine.runtime.sampler import GENERAL, SamplingRows
from tts_engine.sampling import SamplingParams


def test_attention_o_gives_the_two_launch_path(monkeypatch):
    from tts_engine.runtime import code_predictor

    calls = []
    fused = code_predictor.cp_attention_o
    monkeypatch.setattr(code_predictor, "cp_attention_o", lambda *a, **k: calls.append(a[0].shape[0]) or fused(*a, **k))
    cfg, model = random_model("tiny", torch.float32, torch.device("cpu"), seed=5)
    talker = model.talker
    runners = {o: CodePredictorRunner(talker, talker.model.codec_embedding.weight, 2, use_triton=True, gemv_rows=2,
                                      attention_o=o) for o in (False, True)}
    wide = {name: dict(block_n=64, block_k=16) for name in ("qkv", "o", "gate_up", "down", "head")}
    for r in runners.values():  # the interpreter's cost is per program: the tiny model's rows in one
        r.gemv_launch = wide
    layers = len(talker.code_predictor.model.layers)
    h = cfg.talker.code_predictor.hidden_size
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        x2 = torch.randn(1, 2, h, generator=g)
        out = {o: r.layers(x2, 1, 0) for o, r in runners.items()}
        assert calls == [2] * layers, "the prefill pass's layers took the fused launch, with its two tokens"
        for start in (2, 3, 9):
            x1 = torch.randn(1, 1, h, generator=g)
            out = {o: r.layers(x1, 1, start) for o, r in runners.items()}
            assert out[True][1] == out[False][1] is False, "the GEMV path: the residual stream, not normed"
            torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=1e-5,
                                       msg=lambda m, s=start: f"position {s}: {m}")
        for name in ("k", "v"):
            a, b = getattr(runners[True], name), getattr(runners[False], name)
            torch.testing.assert_close(a[:, :1, :, :4], b[:, :1, :, :4], atol=1e-5, rtol=1e-5)
        rows = SamplingRows.empty(1, "cpu")
        rows.set_row(0, SamplingParams(seed=7), 7)
        hidden = torch.randn(1, cfg.talker.hidden_size, generator=g)
        c0, frames = torch.tensor([5]), torch.tensor([3])
        codes = {o: r.predict(hidden, c0, frames, rows, variant=GENERAL) for o, r in runners.items()}
    assert torch.equal(codes[True], codes[False]), f"{codes[True].tolist()} against {codes[False].tolist()}"
    assert len(calls) == layers * (1 + 3 + 15), "every batch-1 pass with attention_o, none without"
