"""The Triton path equals the torch path at the real 1.7B shapes in bf16: one talker step and the
code predictor's prefill and decode steps from the same state give the same hidden states (to
bf16 rounding) and write the same K/V."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.checkpoint import random_model
from tts_engine.runtime.runner import ModelRunner
from tts_engine.sampling import SamplingParams


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.fixture(scope="module")
def model(cuda):
    return random_model("1.7b", torch.bfloat16, cuda, seed=3)


@pytest.fixture(scope="module")
def runners(model):
    cfg, model = model
    pair = [ModelRunner(model, max_slots=8, max_context=256, use_triton=t, use_graphs=False) for t in (True, False)]
    g = torch.Generator(device="cuda").manual_seed(0)
    for slot in range(8):
        x = torch.randn(20 + 9 * slot, cfg.talker.hidden_size, device="cuda", generator=g).bfloat16()
        for r in pair:
            r.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
            r.prefill(slot, x)
    # The two prefills differ by bf16 rounding over 28 layers (the Triton one runs the prompt as
    # decode queries; tests/runtime compares them in fp32): the step tests below start both paths
    # from the same state, so they measure the step alone.
    fast, ref = pair
    for name in ("k_cache", "v_cache", "hidden", "logits"):
        getattr(ref, name).copy_(getattr(fast, name))
    return cfg, pair


# (batch, attention version, talker GEMV rows, PDL): cuBLAS products; the fused GEMVs
# (talker_launch.TALKER_GEMV_LAUNCH); with PDL (talker_launch.TALKER_PDL_LAUNCH, every kernel of the step)
# early: the attention's loads of earlier positions before its PDL wait (`talker_attention_early`).
@pytest.mark.parametrize("batch,attention,gemv_rows,pdl,early", [
    (1, 2, 0, False, False), (5, 2, 0, False, False), (1, 3, 0, False, False), (5, 3, 0, False, False),
    (1, 2, 2, False, False), (2, 3, 2, False, False), (1, 3, 1, True, False), (2, 2, 2, True, False),
    (1, 3, 1, True, True), (2, 3, 2, True, True)])
def test_talker_step_triton_equals_torch(runners, batch, attention, gemv_rows, pdl, early):
    cfg, (fast, ref) = runners
    slots = torch.arange(8 - batch, 8, device="cuda").flip(0)
    positions = 20 + 9 * slots
    g = torch.Generator(device="cuda").manual_seed(100 * batch + 10 * attention + gemv_rows)
    x = torch.randn(batch, cfg.talker.hidden_size, device="cuda", generator=g).bfloat16()
    before = fast.attention_version, fast.talker_gemv_rows, fast.talker_pdl, fast.talker_attention_early
    fast.attention_version, fast.talker_gemv_rows, fast.talker_pdl, fast.talker_attention_early = (
        attention, gemv_rows, pdl, early)
    try:
        with torch.inference_mode():
            got = fast._talker_decode(slots, x, positions)
            want = ref._talker_decode(slots, x, positions)
    finally:
        fast.attention_version, fast.talker_gemv_rows, fast.talker_pdl, fast.talker_attention_early = before
    assert got.dtype == want.dtype == torch.bfloat16
    assert rel_err(got, want) < 2e-2
    # bf16 rounding in two summation orders drifts over the layers: the last layer's keys measured 0.0205
    # on an unchanged path in run 13 (cuBLAS products, attention v2); a wrong kernel is off by O(1).
    for layer, tol in ((0, 2e-2), (27, 3e-2)):
        k_got = fast.k_cache[layer][slots, :, positions]
        k_want = ref.k_cache[layer][slots, :, positions]
        assert rel_err(k_got, k_want) < tol, f"layer {layer} keys"


@pytest.mark.parametrize("batch,attention,gemv_rows,pdl", [(1, 3, 1, True), (2, 3, 2, True), (5, 2, 0, False)])
def test_talker_step_with_one_key_chunk_equals_torch(runners, batch, attention, gemv_rows, pdl, monkeypatch):
    """`talker_attention_splits` 1: one program a kv head over the whole context, no merge launch."""
    cfg, (fast, ref) = runners
    slots = torch.arange(8 - batch, 8, device="cuda").flip(0)
    positions = 20 + 9 * slots
    x = torch.randn(batch, cfg.talker.hidden_size, device="cuda").bfloat16()
    for name, value in (("attention_version", attention), ("talker_gemv_rows", gemv_rows), ("talker_pdl", pdl),
                        ("talker_attention_splits", 1)):
        monkeypatch.setattr(fast, name, value)
    with torch.inference_mode():
        got = fast._talker_decode(slots, x, positions)
        want = ref._talker_decode(slots, x, positions)
    assert rel_err(got, want) < 2e-2


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
    for name, value in (("attention_version", 3), ("talker_gemv_rows", batch), ("talker_pdl", pdl),
                        ("talker_qk_attention", False), ("talker_qk_attention_launch", launch)):
        monkeypatch.setattr(fast, name, value)
    with torch.inference_mode():
        want = ref._talker_decode(slots, x, positions)
        split = fast._talker_decode(slots, x, positions)  # the split attention after a q/k norm launch
        split_kv, ref_kv = ({layer: (r.k_cache[layer][slots, :, positions], r.v_cache[layer][slots, :, positions])
                             for layer in (0, 27)} for r in (fast, ref))
        fast.talker_qk_attention = True
        got = fast._talker_decode(slots, x, positions)
    # bf16 paths one summation order apart drift over 28 layers as far from each other as from torch: run
    # 21 measured 0.018-0.024 between this and the split path (call 2), 0.022-0.024 against torch 190-200
    # positions in (call 1), where the cache's zero keys past the prefill take most of the weight. A wrong kernel is
    # off by O(1); layer 0's new K/V, before any drift, are the split path's to the rounding.
    assert rel_err(got, split) < 3e-2
    assert rel_err(got, want) < max(3e-2, 1.5 * rel_err(split, want))
    for i, name in enumerate("KV"):
        kv_got = (fast.k_cache if i == 0 else fast.v_cache)[0][slots, :, positions]
        assert_same_rounding(kv_got, split_kv[0][i], f"layer 0 {name}")
        layer_27 = ((r.k_cache if i == 0 else r.v_cache)[27][slots, :, positions] for r in (fast, ref))
        assert rel_err(*layer_27) < max(3e-2, 1.5 * rel_err(split_kv[27][i], ref_kv[27][i])), f"layer 27 {name}"


# all GEMV; GEMV steps after a cuBLAS prefill (4 rows); all cuBLAS; the opt-in tensor-core kernel; with
# the q/k norm + RoPE fused into the attention's launch and without, in PDL passes (1-2 rows) and the rest
@pytest.mark.parametrize("b,mma_rows,fused", [(1, 0, True), (2, 0, True), (6, 0, True), (3, 16, True), (8, 16, True),
                                              (1, 0, False), (6, 0, False)])
def test_code_predictor_steps_triton_equal_torch(runners, b, mma_rows, fused):
    cfg, (fast, ref) = runners
    h = cfg.talker.code_predictor.hidden_size
    fast_cp, ref_cp = fast.code_predictor, ref.code_predictor
    assert fast_cp.gemv_rows == 2
    before = fast_cp.fused_attention, fast_cp.fused_attention_pdl
    fast_cp.mma_rows, fast_cp.fused_attention, fast_cp.fused_attention_pdl = mma_rows, fused, fused
    try:
        _compare_code_predictor_steps(fast_cp, ref_cp, b, h)
    finally:
        fast_cp.mma_rows, (fast_cp.fused_attention, fast_cp.fused_attention_pdl) = 0, before


@pytest.mark.parametrize("b,o,gate_up,down", [(4, 0, 0, 3), (6, 0, 0, 2), (8, 0, 0, 4), (8, 0, 0, 8), (4, 2, 2, 4),
                                               (8, 4, 4, 2)])
def test_cublas_steps_with_products_in_split_k_partials_equal_torch(runners, b, o, gate_up, down):
    """The code predictor's cuBLAS passes and a talker step with their o, gate/up and down products as fp32 split-K
    partials that the launch after them sums (`fused.SplitK`: `split_k`, `talker_split_k`) against the torch path,
    as their cuBLAS versions are."""
    from tts_engine.runtime.fused import SplitK

    cfg, (fast, ref) = runners
    fast_cp = fast.code_predictor
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


def _graph_replays(fn, n: int = 20, before=None) -> list[torch.Tensor]:
    """fn() captured in a CUDA graph as the engine runs it (compiled outside the capture), its output
    after each of n replays: a race need not show every time. before(i): queued ahead of replay i (the
    tests alternate the step's input there, so that a read of the previous replay's values shows)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    outs = []
    for i in range(n):
        if before is not None:
            before(i)
        graph.replay()
        torch.cuda.synchronize()
        outs.append(out.clone())
    return outs


def _assert_pdl_gives_the_output_without(outs: dict[bool, list[torch.Tensor]], what: str) -> None:
    """outs[pdl]: the replays with and without PDL of the same kernels, their inputs alternating between two
    (replay i equals replay i % 2). In this order, so that a failure says which."""
    differ = [i for i, got in enumerate(outs[False]) if not torch.equal(got, outs[False][i % 2])]
    assert not differ, f"replays {differ} without PDL differ from their input's first: nondeterministic kernels"
    differ = [i for i, got in enumerate(outs[True]) if not torch.equal(got, outs[True][i % 2])]
    assert not differ, (f"replays {differ} with PDL differ from their input's first: a kernel reads before its input "
                        "is written")
    differ = [i for i in (0, 1) if not torch.equal(outs[True][i], outs[False][i])]
    assert not differ, (
        f"every replay with PDL gives the same {what}, but not those without (input {differ}): the PDL-compiled "
        "kernels round differently, or a race that repeats")


# gemv `row_blocks`: each program streams four blocks of two whole rows, the next block's weights loading while
# the last one's are summed (8 warps: two blocks of the talker's rows in registers without spilling)
ROW_BLOCKS = dict(block_n=2, num_warps=8, row_blocks=4)

@pytest.mark.parametrize("b,fused,change", [(1, False, ""), (2, False, ""), (1, True, ""), (2, True, ""),
                                            (1, True, "residual_early"), (2, True, "residual_early"),
                                            (1, True, "row_chunks"), (1, True, "row_blocks+residual_early"),
                                            (2, True, "row_blocks+row_chunks"), (1, True, "qkv_table+residual_early"),
                                            (2, True, "qkv_table+residual_early"),
                                            (1, True, "attention_o+qkv_table+residual_early"),
                                            (2, True, "attention_o+qkv_table+residual_early"),
                                            (1, True, "attention_o+residual_early")])
def test_code_predictor_with_pdl_gives_the_codes_without(runners, b, fused, change):
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
        # The same whole-row kernel launched plainly (run 9's version of this test left out
        # whole_rows, so its reference ran the sliced kernel: another summation order, other codes).
        with_pdl = {name: {**cfg, "residual_early": "residual_early" in change and name in ("o", "down"),
                           "row_chunks": 3 if "row_chunks" in change and name == "down" else 1}
                    for name, cfg in PDL_LAUNCH.items()}
        if "row_blocks" in change:
            with_pdl = {name: {**cfg, **ROW_BLOCKS} for name, cfg in with_pdl.items()}
        no_pdl = {name: {**cfg, "pdl": False, "whole_rows": True} for name, cfg in with_pdl.items()}
        # The fused attention with the warps of a PDL pass in both: the warps set its reduction order
        # (run 14 compared 8 warps with PDL against 4 without: equal replays, other codes).
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
                codes[pdl] = _graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL),
                                            before=alternate)
                assert not cp.o_sum.any(), "the attention + o sum is not zero after the frames"
            finally:
                PDL_LAUNCH.update(table_was)
                cp.pdl, cp.gemv_launch, (cp.qkv_table, cp.attention_o) = was, table, table_o
                cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps = fused_was
    assert len(torch.cat(codes[False]).unique()) > 1
    _assert_pdl_gives_the_output_without(
        codes, f"codes ({codes[True][0].tolist()} with PDL, {codes[False][0].tolist()} without)")


@pytest.mark.parametrize("b", [1, 2, 8])
def test_code_predictor_draws_that_prefetch_give_the_codes_without(runners, b):
    """Each draw bringing the next pass's first weights into L2 (`draw_prefetch` 3: programs beside the row's that
    issue `prefetch.global.L2`) changes nothing the frame computes: graph replays give the codes of the draws
    without it, the engine's PDL passes (batches 1, 2) and cuBLAS ones (8)."""
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
    hidden = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
    c0 = torch.arange(b, device="cuda") * 97 + 5
    frames = torch.arange(b, device="cuda") + 3
    rows = fast.rows.gather(torch.arange(b, device="cuda"))
    codes = {}
    with torch.inference_mode():
        for n in (0, 3):
            cp.draw_prefetch = n
            try:
                codes[n] = _graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL), n=4)
            finally:
                cp.draw_prefetch = 0
    assert all(torch.equal(got, want) for got, want in zip(codes[3], codes[0])), \
        f"codes {codes[3][0].tolist()} with the prefetch, {codes[0][0].tolist()} without"


@pytest.fixture(scope="module")
def wide_code_predictors(model, runners):
    """(fast, reference) code predictors over the fixture's weights for batches up to 32 (the fixture's runners hold
    8): the fast one with every default (PDL, the qkv table, attention + o) and the tensor-core passes up to 64
    rows; sampled rows (the talker's defaults) with seeds 0-31."""
    from tts_engine.runtime.code_predictor import CodePredictorRunner
    from tts_engine.runtime.sampler import SamplingRows

    _, (fast, _) = runners
    made = [CodePredictorRunner(model[1].talker, fast.codec_embedding, 32, use_triton=t, gemv_rows=2, pdl=t,
                                mma_rows=64, qkv_table=t, attention_o=t) for t in (True, False)]
    rows = SamplingRows.empty(32, fast.device)
    for i in range(32):
        rows.set_row(i, SamplingParams(seed=i), seed=i)
    return made, rows


# the tensor-core passes (kernels/gemv_mma.py, PDL) at 8-64 rows: batch 8 (prefill 16 rows), 16 (32), 32 (64)
@pytest.mark.parametrize("b", [8, 16, 32])
def test_code_predictor_tensor_core_passes_equal_torch(wide_code_predictors, runners, b):
    cfg, _ = runners
    (fast_cp, ref_cp), _ = wide_code_predictors
    launch = fast_cp.launch(b)["qkv"]
    assert fast_cp.uses_pdl(b) and launch["mma"] and launch["pdl"], "the tensor-core passes run with PDL"
    _compare_code_predictor_steps(fast_cp, ref_cp, b, cfg.talker.code_predictor.hidden_size)


@pytest.mark.parametrize("b", [4, 8, 32])
def test_code_predictor_tensor_core_passes_with_pdl_give_the_codes_without(wide_code_predictors, runners, b):
    """The tensor-core passes (3-64 rows) with programmatic dependent launch (o's and down's residual read before
    the wait; the attention and the draws launched early), captured in a graph as the engine runs it, against the
    same kernels without PDL (the attention with the same warps): any difference is a kernel reading before its input
    is written. Batch 32's prefill pass (64 rows) on them too."""
    from tts_engine.runtime.code_predictor import attention_warps
    from tts_engine.runtime.sampler import GENERAL

    cfg, _ = runners
    (cp, _), sampling = wide_code_predictors
    hidden = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
    inputs = (hidden.clone(), torch.randn_like(hidden))

    def alternate(i):
        hidden.copy_(inputs[i % 2])

    c0 = torch.arange(b, device="cuda") * 97 % 2048
    frames = torch.arange(b, device="cuda") + 3
    rows = sampling.gather(torch.arange(b, device="cuda"))
    codes, was = {}, (cp.pdl, cp.fused_attention_warps)
    try:
        with torch.inference_mode():
            for pdl in (False, True):
                cp.pdl, cp.fused_attention_warps = pdl, attention_warps(b, pdl=True)
                assert cp.uses_pdl(b) == pdl and cp.launch(2 * b)["down"]["pdl"] == pdl
                codes[pdl] = _graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL),
                                            before=alternate)
    finally:
        cp.pdl, cp.fused_attention_warps = was
    assert len(torch.cat(codes[False]).unique()) > 1
    _assert_pdl_gives_the_output_without(
        codes, f"codes ({codes[True][0][:2].tolist()} with PDL, {codes[False][0][:2].tolist()} without)")


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
def test_code_predictor_with_the_launchs_own_qkv_table_gives_its_codes(runners, b):
    """A table made by the very launch a pass of b rows makes (the whole-row GEMV over b rows at a time, as the
    pass holds them) turns passes 1-14's qkv product into gathers without changing one bit: the graph-replayed
    codes (PDL, sampled rows) with it equal those of the launched product. Any difference is the gathers, the
    attention reading the gathered rows, or o reading the draw's output early."""
    from tts_engine.kernels.gemv import gemv
    from tts_engine.runtime.code_predictor import PDL_LAUNCH
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
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
                codes[name] = _graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL), n=4)
    finally:
        cp.qkv_table = kept
    for name, outs in codes.items():
        assert all(torch.equal(o, outs[0]) for o in outs), f"{name}: replays differ"
    assert len(codes["launched"][0].unique()) > 1
    assert torch.equal(codes["table"][0], codes["launched"][0]), (
        f"codes with the table {codes['table'][0].tolist()} != launched {codes['launched'][0].tolist()}")


@pytest.mark.parametrize("b,attention,table,early", [(1, 3, "whole_rows", False), (2, 2, "whole_rows", False),
                                                     (1, 3, "mixed", False), (1, 3, "whole_rows", True),
                                                     (2, 3, "whole_rows", True), (1, 3, "residual_early", False),
                                                     (1, 3, "qk_attention", False),
                                                     (2, 3, "qk_attention+residual_early", False),
                                                     (1, 3, "qk_attention+row_chunks", False),
                                                     (1, 3, "qk_attention+row_blocks", False),
                                                     (2, 3, "row_blocks+row_chunks+residual_early", False)])
def test_talker_step_with_pdl_gives_the_step_without(runners, b, attention, table, early):
    """The talker's GEMV step with programmatic dependent launch (talker_launch.TALKER_PDL_LAUNCH: whole-row
    products reading their weights before the wait, and every other kernel of the step launched early;
    early: the attention's loads of earlier positions before its wait), captured in a graph as the
    engine runs it, against the same kernels launched without PDL: the same arithmetic, so any
    difference is a kernel reading before its input is written. The step's own cache positions are
    overwritten with NaN before each replay: a replay writes the same keys and values there as the
    one before, so reading them early would not show otherwise. table residual_early: o's and down's
    residual read before their wait too; qk_attention: kernels/talker_attention.py's one launch for the
    q/k norm, RoPE, K/V store and attention (8 warps a program); row_chunks: down's rows in three slices;
    row_blocks: every product's row blocks streamed four a program."""
    from tts_engine.runtime.talker_launch import TALKER_PDL_LAUNCH, TALKER_PDL_MIXED

    launch = TALKER_PDL_MIXED if table == "mixed" else TALKER_PDL_LAUNCH
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
    before = (fast.attention_version, fast.talker_gemv_rows, fast.talker_pdl, fast.talker_launch,
              fast.talker_pdl_launch, fast.talker_attention_early, fast.talker_qk_attention,
              fast.talker_qk_attention_launch)

    def poison(i):
        x.copy_(inputs[i % 2])
        for cache in (fast.k_cache, fast.v_cache):
            cache[:, slots, :, positions] = float("nan")  # [layers, b, Hkv, D]

    hidden = {}
    with torch.inference_mode():
        for pdl in (False, True):
            fast.attention_version, fast.talker_gemv_rows, fast.talker_pdl = attention, 2, pdl
            fast.talker_launch, fast.talker_pdl_launch, fast.talker_attention_early = no_pdl, launch, early
            fast.talker_qk_attention, fast.talker_qk_attention_launch = qk_attention, dict(num_warps=8)
            try:
                hidden[pdl] = _graph_replays(lambda: fast._talker_decode(slots, x, positions), before=poison)
            finally:
                (fast.attention_version, fast.talker_gemv_rows, fast.talker_pdl, fast.talker_launch,
                 fast.talker_pdl_launch, fast.talker_attention_early, fast.talker_qk_attention,
                 fast.talker_qk_attention_launch) = before
    assert all(torch.isfinite(h).all() for h in hidden[False]), "NaN without PDL: the poison reached the step"
    assert not torch.equal(hidden[False][0], hidden[False][1]), "the two inputs give one output: a stale read hides"
    _assert_pdl_gives_the_output_without(hidden, "hidden state")
