"""The Triton path equals the torch path at the real 1.7B shapes in bf16: one talker step from the same state gives
the same hidden state (to bf16 rounding) and writes the same K/V, with each of its kernel paths, and with PDL the
output of the same kernels without it. The code predictor's: tests/gpu/test_code_predictor_gpu.py; the runners:
tests/gpu/conftest.py."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.replays import ROW_BLOCKS, assert_pdl_gives_the_output_without, graph_replays, rel_err
from tests.kernels.compare import assert_same_rounding


# (batch, talker GEMV rows, PDL): cuBLAS products; the fused GEMVs (talker_launch.TALKER_GEMV_LAUNCH); with PDL
# (talker_launch.TALKER_PDL_LAUNCH, every kernel of the step)
@pytest.mark.parametrize("batch,gemv_rows,pdl", [(1, 0, False), (5, 0, False), (1, 2, False), (2, 2, False),
                                                 (1, 1, True), (2, 2, True)])
def test_talker_step_triton_equals_torch(runners, batch, gemv_rows, pdl):
    cfg, (fast, ref) = runners
    slots = torch.arange(8 - batch, 8, device="cuda").flip(0)
    positions = 20 + 9 * slots
    g = torch.Generator(device="cuda").manual_seed(100 * batch + gemv_rows)
    x = torch.randn(batch, cfg.talker.hidden_size, device="cuda", generator=g).bfloat16()
    before = fast.talker_gemv_rows, fast.talker_pdl
    fast.talker_gemv_rows, fast.talker_pdl = gemv_rows, pdl
    try:
        with torch.inference_mode():
            got = fast._talker_decode(slots, x, positions)
            want = ref._talker_decode(slots, x, positions)
    finally:
        fast.talker_gemv_rows, fast.talker_pdl = before
    assert got.dtype == want.dtype == torch.bfloat16
    assert rel_err(got, want) < 2e-2
    # bf16 rounding in two summation orders drifts over the layers: the last layer's keys measure ~0.02
    # on an unchanged path (cuBLAS products); a wrong kernel is off by O(1).
    for layer, tol in ((0, 2e-2), (27, 3e-2)):
        k_got = fast.k_cache[layer][slots, :, positions]
        k_want = ref.k_cache[layer][slots, :, positions]
        assert rel_err(k_got, k_want) < tol, f"layer {layer} keys"


# (batch, PDL, launch keywords, far): kernels/talker_attention.py in the talker's GEMV steps; far: the rows
# 190-200 positions in, two blocks of 128 keys (four of 32 / 64 where the launch says) past the prefilled part.
@pytest.mark.parametrize("batch,pdl,launch,far", [
    (1, True, {}, False), (1, True, {}, True), (1, True, dict(dot=False), True), (1, False, {}, True),
    (2, True, dict(num_warps=8, early=False), True), (1, True, dict(block_n=32, num_warps=8), False)])
def test_talker_step_with_fused_qk_attention_equals_torch(runners, batch, pdl, launch, far, monkeypatch):
    """`talker_qk_attention`: q/k norm + RoPE + K/V store + attention over the whole context in one launch."""
    cfg, (fast, ref) = runners
    slots = torch.arange(8 - batch, 8, device="cuda").flip(0)
    positions = 200 - slots if far else 20 + 9 * slots
    x = torch.randn(batch, cfg.talker.hidden_size, device="cuda").bfloat16()
    launch = {**fast.talker_qk_attention_launch, **launch}  # the runner's table, these keywords changed
    for name, value in (("talker_gemv_rows", batch), ("talker_pdl", pdl),
                        ("talker_qk_attention", False), ("talker_qk_attention_launch", launch)):
        monkeypatch.setattr(fast, name, value)
    with torch.inference_mode():
        want = ref._talker_decode(slots, x, positions)
        split = fast._talker_decode(slots, x, positions)  # the split attention after a q/k norm launch
        split_kv, ref_kv = ({layer: (r.k_cache[layer][slots, :, positions], r.v_cache[layer][slots, :, positions])
                             for layer in (0, 27)} for r in (fast, ref))
        fast.talker_qk_attention = True
        got = fast._talker_decode(slots, x, positions)
    # bf16 paths one summation order apart drift over 28 layers as far from each other as from torch:
    # 0.018-0.024 between this and the split path, 0.022-0.024 against torch 190-200 positions in, where
    # the cache's zero keys past the prefill take most of the weight. A wrong kernel is
    # off by O(1); layer 0's new K/V, before any drift, are the split path's to the rounding.
    assert rel_err(got, split) < 3e-2
    assert rel_err(got, want) < max(3e-2, 1.5 * rel_err(split, want))
    for i, name in enumerate("KV"):
        kv_got = (fast.k_cache if i == 0 else fast.v_cache)[0][slots, :, positions]
        assert_same_rounding(kv_got, split_kv[0][i], f"layer 0 {name}")
        layer_27 = ((r.k_cache if i == 0 else r.v_cache)[27][slots, :, positions] for r in (fast, ref))
        assert rel_err(*layer_27) < max(3e-2, 1.5 * rel_err(split_kv[27][i], ref_kv[27][i])), f"layer 27 {name}"


@pytest.mark.parametrize("b,table", [(1, "whole_rows"), (2, "whole_rows"), (1, "residual_early"), (1, "qk_attention"),
                                     (2, "qk_attention+residual_early"), (1, "qk_attention+row_chunks"),
                                     (1, "qk_attention+row_blocks"), (2, "row_blocks+row_chunks+residual_early")])
def test_talker_step_with_pdl_gives_the_step_without(runners, b, table):
    """The talker's GEMV step with programmatic dependent launch (talker_launch.TALKER_PDL_LAUNCH: whole-row
    products reading their weights before the wait, and every other kernel of the step launched early), captured
    in a graph as the engine runs it, against the same kernels launched without PDL: the same arithmetic, so any
    difference is a kernel reading before its input is written. The step's own cache positions are
    overwritten with NaN before each replay: a replay writes the same keys and values there as the
    one before, so reading them early would not show otherwise. table residual_early: o's and down's
    residual read before their wait too; qk_attention: kernels/talker_attention.py's one launch for the
    q/k norm, RoPE, K/V store and attention (8 warps a program); row_chunks: down's rows in three slices;
    row_blocks: every product's row blocks streamed four a program."""
    from tts_engine.runtime.talker_launch import TALKER_PDL_LAUNCH

    launch = TALKER_PDL_LAUNCH
    # o's and down's residual read before their wait: the default table's setting, here on where the case
    # names it and off elsewhere, so that both are tested
    launch = {name: {**cfg, "residual_early": "residual_early" in table and name in ("o", "down")}
              if cfg.get("whole_rows") else cfg for name, cfg in launch.items()}
    if "row_chunks" in table:  # down's 6,144-wide rows as 3 x 2,048
        launch = {name: {**cfg, "row_chunks": 3} if name == "down" else cfg for name, cfg in launch.items()}
    if "row_blocks" in table:
        launch = {name: {**cfg, **ROW_BLOCKS} for name, cfg in launch.items()}
    qk_attention = "qk_attention" in table
    cfg, (fast, _) = runners
    slots = torch.arange(b, device="cuda")
    positions = 30 + 7 * slots
    x = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
    inputs = (x.clone(), torch.randn_like(x))  # replays alternate between them
    no_pdl = {name: {**cfg, "pdl": False} for name, cfg in launch.items()}
    before = (fast.talker_gemv_rows, fast.talker_pdl, fast.talker_launch, fast.talker_pdl_launch,
              fast.talker_qk_attention, fast.talker_qk_attention_launch)

    def poison(i):
        x.copy_(inputs[i % 2])
        for cache in (fast.k_cache, fast.v_cache):
            cache[:, slots, :, positions] = float("nan")  # [layers, b, Hkv, D]

    hidden = {}
    with torch.inference_mode():
        for pdl in (False, True):
            fast.talker_gemv_rows, fast.talker_pdl = 2, pdl
            fast.talker_launch, fast.talker_pdl_launch = no_pdl, launch
            fast.talker_qk_attention, fast.talker_qk_attention_launch = qk_attention, dict(num_warps=8)
            try:
                hidden[pdl] = graph_replays(lambda: fast._talker_decode(slots, x, positions), before=poison)
            finally:
                (fast.talker_gemv_rows, fast.talker_pdl, fast.talker_launch, fast.talker_pdl_launch,
                 fast.talker_qk_attention, fast.talker_qk_attention_launch) = before
    assert all(torch.isfinite(h).all() for h in hidden[False]), "NaN without PDL: the poison reached the step"
    assert not torch.equal(hidden[False][0], hidden[False][1]), "the two inputs give one output: a stale read hides"
    assert_pdl_gives_the_output_without(hidden, "hidden state")
