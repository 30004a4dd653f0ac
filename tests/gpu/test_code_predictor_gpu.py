"""The code predictor's Triton path equals its torch path at the real 1.7B shapes in bf16: its prefill and decode
passes from the same state give the same logits (to bf16 rounding) and write the same K/V, on the GEMV and cuBLAS
passes and with the products as split-K partials; with PDL, the first-layer qkv table, attention + o or early
triggers, graph replays give the codes of the same kernels without. The runners:
tests/gpu/conftest.py."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.replays import ROW_BLOCKS, assert_pdl_gives_the_output_without, graph_replays, rel_err
from tts_engine.sampling import SamplingParams


# all GEMV; GEMV steps after a cuBLAS prefill (4 rows); all cuBLAS; with the q/k norm + RoPE fused into the
# attention's launch and without, in PDL passes (1-2 rows) and the rest (cuBLAS': the CUDA kernel's rows, the default
# where it runs, have tests/gpu/test_cp_gemv_gpu.py)
@pytest.mark.parametrize("b,fused", [(1, True), (2, True), (6, True), (3, True), (8, True), (1, False), (6, False)])
def test_code_predictor_steps_triton_equal_torch(runners, monkeypatch, b, fused):
    cfg, (fast, ref) = runners
    h = cfg.talker.code_predictor.hidden_size
    fast_cp, ref_cp = fast.code_predictor, ref.code_predictor
    monkeypatch.setattr(fast_cp, "gemv_kernel_rows", 0)
    assert fast_cp.gemv_rows == 2
    before = fast_cp.fused_attention, fast_cp.fused_attention_pdl
    fast_cp.fused_attention, fast_cp.fused_attention_pdl = fused, fused
    try:
        _compare_code_predictor_steps(fast_cp, ref_cp, b, h)
    finally:
        fast_cp.fused_attention, fast_cp.fused_attention_pdl = before


@pytest.mark.parametrize("b,o,gate_up,down", [(4, 0, 0, 3), (6, 0, 0, 2), (8, 0, 0, 4), (8, 0, 0, 8), (4, 2, 2, 4),
                                               (8, 4, 4, 2)])
def test_cublas_steps_with_products_in_split_k_partials_equal_torch(runners, monkeypatch, b, o, gate_up, down):
    """The code predictor's cuBLAS passes and a talker step with their o, gate/up and down products as fp32 split-K
    partials that the launch after them sums (`fused.SplitK`: `split_k`, `talker_split_k`) against the torch path,
    as their cuBLAS versions are."""
    from tts_engine.runtime.fused import SplitK

    cfg, (fast, ref) = runners
    fast_cp = fast.code_predictor
    monkeypatch.setattr(fast_cp, "gemv_kernel_rows", 0)
    before = fast_cp.split_k, fast.talker_split_k
    fast_cp.split_k = fast.talker_split_k = SplitK(o=o, gate_up=gate_up, down=down)
    try:
        _compare_code_predictor_steps(fast_cp, ref.code_predictor, b, cfg.talker.code_predictor.hidden_size)
        slots = torch.arange(8 - b, 8, device="cuda").flip(0)
        positions = 20 + 9 * slots
        x = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
        with torch.inference_mode():
            got, want = fast._talker_decode(slots, x, positions), ref._talker_decode(slots, x, positions)
        assert rel_err(got, want) < 2e-2
    finally:
        fast_cp.split_k, fast.talker_split_k = before


def _compare_code_predictor_steps(fast_cp, ref_cp, b, h):
    def logits(cp, x, start):  # the layers' output through codebook 1's head (the final norm included)
        return cp.logits(*cp.layers(x, b, start), 0)

    with torch.inference_mode():
        x2 = torch.randn(b, 2, h, device="cuda").bfloat16()
        assert rel_err(logits(fast_cp, x2, 0), logits(ref_cp, x2, 0)) < 2e-2  # the two prefill positions
        for start in (2, 3):
            x1 = torch.randn(b, 1, h, device="cuda").bfloat16()
            assert rel_err(logits(fast_cp, x1, start), logits(ref_cp, x1, start)) < 2e-2, f"position {start}"
        assert rel_err(fast_cp.v[:, :b, :, :4], ref_cp.v[:, :b, :, :4]) < 2e-2


@pytest.mark.parametrize("b,fused,change", [(1, False, ""), (2, False, ""), (1, True, ""), (2, True, ""),
                                            (1, True, "residual_early"), (2, True, "residual_early"),
                                            (1, True, "row_chunks"), (1, True, "row_blocks+residual_early"),
                                            (2, True, "row_blocks+row_chunks"), (1, True, "qkv_table+residual_early"),
                                            (2, True, "qkv_table+residual_early"),
                                            (1, True, "attention_o+qkv_table+residual_early"),
                                            (2, True, "attention_o+qkv_table+residual_early"),
                                            (1, True, "attention_o+residual_early")])
def test_code_predictor_with_pdl_gives_the_codes_without(runners, monkeypatch, b, fused, change):
    """Batches 1 and 2 (passes of 1-2 rows: the engine's PDL passes) with programmatic dependent
    launch (whole-row GEMVs, every kernel launched early and waiting for its inputs), captured in a
    graph as the engine runs it, against the same kernels launched without PDL: the same arithmetic,
    so any difference is a kernel reading too early. With and without the q/k norm + RoPE fused into
    the attention (whose cache reads of earlier positions come before its wait). change: the table with o's
    and down's residual read before their wait (residual_early; the default now, so "" sets it off), or down's
    rows in three slices (row_chunks), or every product's row blocks streamed four a program (row_blocks: two rows a
    block, 8 warps), or passes 1-14's first-layer qkv gathered from the table by the draw (qkv_table: the attention
    then follows the draw, and o reads the draw's output as its residual before its wait; without it in the name,
    no table), or the attention and o in one launch (attention_o: its fixed-point sum read by gate/up after its wait
    and by down before its, then zeroed)."""
    from tts_engine.kernels.backend import pdl_supported
    from tts_engine.runtime.code_predictor import PDL_LAUNCH, attention_warps
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
    # the Triton products at batch 1 too (the CUDA one-row kernel, the default where it runs, rounds otherwise:
    # tests/gpu/test_cp_gemv_gpu.py)
    monkeypatch.setattr(cp, "gemv_kernel", None)
    assert pdl_supported(fast.device), "the H200 (sm90) supports PDL"
    hidden = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
    inputs = (hidden.clone(), torch.randn_like(hidden))  # replays alternate between them

    def alternate(i):
        hidden.copy_(inputs[i % 2])

    c0 = torch.tensor([17, 1500][:b], device="cuda")
    frames = torch.tensor([3, 9][:b], device="cuda")
    rows = fast.rows.gather(torch.arange(b, device="cuda"))
    codes = {}
    with torch.inference_mode():
        # The same whole-row kernel launched plainly (without whole_rows the reference would run the
        # sliced kernel: another summation order, other codes).
        with_pdl = {name: {**cfg, "residual_early": "residual_early" in change and name in ("o", "down"),
                           "row_chunks": 3 if "row_chunks" in change and name == "down" else 1}
                    for name, cfg in PDL_LAUNCH.items()}
        if "row_blocks" in change:
            with_pdl = {name: {**cfg, **ROW_BLOCKS} for name, cfg in with_pdl.items()}
        no_pdl = {name: {**cfg, "pdl": False, "whole_rows": True} for name, cfg in with_pdl.items()}
        # The fused attention with the warps of a PDL pass in both: the warps set its reduction order
        # (8 warps with PDL against 4 without give equal replays but other codes).
        fused_was = cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps
        table, was, table_o = cp.gemv_launch, cp.pdl, (cp.qkv_table, cp.attention_o)
        qkv_table = cp.first_layer_qkv_table() if "qkv_table" in change else None
        for pdl in (False, True):
            cp.pdl, cp.gemv_launch = pdl, table if pdl else no_pdl
            table_was = dict(PDL_LAUNCH)
            PDL_LAUNCH.update(with_pdl)
            cp.fused_attention = cp.fused_attention_pdl = fused
            cp.fused_attention_warps = attention_warps(b, pdl=True)
            cp.qkv_table, cp.attention_o = qkv_table, "attention_o" in change
            try:
                codes[pdl] = graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL),
                                            before=alternate)
                assert not cp.o_sum.any(), "the attention + o sum is not zero after the frames"
            finally:
                PDL_LAUNCH.update(table_was)
                cp.pdl, cp.gemv_launch, (cp.qkv_table, cp.attention_o) = was, table, table_o
                cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps = fused_was
    assert len(torch.cat(codes[False]).unique()) > 1
    assert_pdl_gives_the_output_without(
        codes, f"codes ({codes[True][0].tolist()} with PDL, {codes[False][0].tolist()} without)")


@pytest.mark.parametrize("b", [1, 2])
@pytest.mark.parametrize("early", [("attention_o",), ("down",), ("head", "draw"),
                                   ("qkv", "attention_o", "down", "head", "draw")])
def test_code_predictor_with_early_triggers_gives_the_codes_of_late_ones(runners, b, early):
    """The PDL passes (batches 1, 2; every default: the qkv table, attention + o, residuals read before the wait)
    with `early_trigger` (those launches let the next one start before their own wait, so two launches ahead run
    their early reads while the one before finishes) give, replay after replay with inputs alternating, the codes
    of the same launches triggering after their wait: a launch that read early what was not yet written would
    show as a replay that differs."""
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
    assert cp.uses_pdl(b) and cp.attention_o and cp.qkv_table is not None
    hidden = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
    inputs = (hidden.clone(), torch.randn_like(hidden))

    def alternate(i):
        hidden.copy_(inputs[i % 2])

    c0 = torch.tensor([17, 1500][:b], device="cuda")
    frames = torch.tensor([3, 9][:b], device="cuda")
    rows = fast.rows.gather(torch.arange(b, device="cuda"))
    codes, own = {}, cp.early_trigger
    with torch.inference_mode():
        for trigger in ((), early):
            cp.early_trigger = trigger
            try:
                codes[trigger] = graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL),
                                               before=alternate)
                assert not cp.o_sum.any(), "the attention + o sum is not zero after the frames"
            finally:
                cp.early_trigger = own
    assert len(torch.cat(codes[()]).unique()) > 1
    for trigger, outs in codes.items():
        differ = [i for i, got in enumerate(outs) if not torch.equal(got, outs[i % 2])]
        assert not differ, f"early triggers {trigger}: replays {differ} differ from their input's first"
    assert all(torch.equal(codes[early][i], codes[()][i]) for i in (0, 1)), \
        f"codes {codes[early][0].tolist()} with early triggers {early}, {codes[()][0].tolist()} without"


def code_predictors_32(triton_model, runners, **fast):
    """(fast, reference) code predictors over the fixture's weights for batches up to 32 (the fixture's runners hold
    8), the fast one with PDL, the qkv table, attention + o and `fast` (FastPathOptions' cp_* fields); sampled rows
    (the talker's defaults) with seeds 0-31."""
    from tts_engine.runtime.code_predictor import CodePredictorRunner
    from tts_engine.runtime.options import FastPathOptions
    from tts_engine.runtime.sampler import SamplingRows

    _, (runner, _) = runners
    made = [CodePredictorRunner(triton_model[1].talker, runner.codec_embedding, 32, use_triton=t, pdl=t,
                                options=FastPathOptions(**(fast if t else {}))) for t in (True, False)]
    rows = SamplingRows.empty(32, runner.device)
    for i in range(32):
        rows.set_row(i, SamplingParams(seed=i), seed=i)
    return made, rows


def test_code_predictor_qkv_table_is_the_first_layers_product(runners):
    """`first_layer_qkv_table` (the reference's norm, one cuBLAS product) against the product a batch-1 pass
    launches (the whole-row GEMV of code_predictor.PDL_LAUNCH): within bf16 rounding, row by row."""
    from tts_engine.kernels.gemv import gemv
    from tts_engine.runtime.code_predictor import PDL_LAUNCH

    _, (fast, _) = runners
    cp = fast.code_predictor
    table, layer = cp.first_layer_qkv_table(), cp.stack.layers[0]
    assert table.shape == (14, 2048, layer.w_qkv.shape[0])
    launch = {**PDL_LAUNCH["qkv"], "pdl": False}
    for j in (0, 6, 13):
        for c in (0, 7, 1999, 2047):
            want = gemv(cp.inputs[j][c:c + 1], layer.w_qkv, norm=(layer.ln_in, cp.stack.eps), **launch)[0]
            assert rel_err(table[j, c], want) < 1e-2, f"pass {j + 1}, code {c}: the table's row against the GEMV's"


@pytest.mark.parametrize("b", [1, 2])
def test_code_predictor_with_the_launchs_own_qkv_table_gives_its_codes(runners, monkeypatch, b):
    """A table made by the very launch a pass of b rows makes (the whole-row GEMV over b rows at a time, as the
    pass holds them) turns passes 1-14's qkv product into gathers without changing one bit: the graph-replayed
    codes (PDL, sampled rows) with it equal those of the launched product. Any difference is the gathers, the
    attention reading the gathered rows, or o reading the draw's output early."""
    from tts_engine.kernels.gemv import gemv
    from tts_engine.runtime.code_predictor import PDL_LAUNCH
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
    # the Triton products at batch 1 too (the CUDA one-row kernel, the default where it runs, rounds otherwise:
    # tests/gpu/test_cp_gemv_gpu.py)
    monkeypatch.setattr(cp, "gemv_kernel", None)
    assert cp.uses_pdl(b)
    layer, launch = cp.stack.layers[0], {**PDL_LAUNCH["qkv"], "pdl": False}
    with torch.inference_mode():
        table = torch.stack([torch.cat([gemv(x[i:i + b], layer.w_qkv, norm=(layer.ln_in, cp.stack.eps), **launch)
                                        for i in range(0, x.shape[0], b)]) for x in cp.inputs[:14]])
    hidden = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
    c0 = torch.tensor([17, 1500][:b], device="cuda")
    frames = torch.tensor([3, 9][:b], device="cuda")
    rows = fast.rows.gather(torch.arange(b, device="cuda"))
    codes, kept = {}, cp.qkv_table
    try:
        with torch.inference_mode():
            for name, value in (("launched", None), ("table", table)):
                cp.qkv_table = value
                codes[name] = graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL), n=4)
    finally:
        cp.qkv_table = kept
    for name, outs in codes.items():
        assert all(torch.equal(o, outs[0]) for o in outs), f"{name}: replays differ"
    assert len(codes["launched"][0].unique()) > 1
    assert torch.equal(codes["table"][0], codes["launched"][0]), (
        f"codes with the table {codes['table'][0].tolist()} != launched {codes['launched'][0].tolist()}")
