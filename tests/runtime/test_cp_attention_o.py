"""The code predictor's attention + o launch (FastPathOptions.cp_attention_o) against the two launches it replaces,
on CPU through Triton's interpreter (in a subprocess: tests/runtime/driver.py says why)."""

from __future__ import annotations

import torch

from tests.runtime.driver import (
    assert_interpreted,
    assert_streams_equal,
    run_interpreted,
    small_driver,
    start_streams,
    stream_codes,
    two_streams,
)
from tts_engine.runtime.options import FastPathOptions
from tts_engine.synthesizer import Synthesizer


def check_cp_attention_o_interpreted(checkpoint: str) -> None:
    """Runs in the subprocess: with cp_attention_o the code predictor's GEMV passes give the codes of its two
    launches (the fused attention, then o with its residual), on the K-loop GEMVs and on the whole-row ones (the
    PDL passes' kernels, here without PDL), with and without the first-layer qkv table; no o product is launched;
    the fixed-point sum is zero after every frame."""
    torch.set_num_threads(1)
    assert_interpreted()
    from tts_engine.kernels.gemv import gemv as gemv_kernel
    from tts_engine.runtime import code_predictor, fused

    k_loop = {name: dict(block_n=64, block_k=16) for name in ("qkv", "o", "gate_up", "down", "head")}
    whole_rows = {name: dict(block_n=16, whole_rows=True, residual_early=name in ("o", "down"))
                  for name in ("qkv", "o", "gate_up", "down", "head")}
    o_products = []

    def counted(x, w, *a, **k):
        if any(w is layer.w_o for layer in cp.stack.layers):
            o_products.append(x.shape[0])
        return gemv_kernel(x, w, *a, **k)
    fused.gemv = counted
    code_predictor.ATTENTION_O_LAUNCH = {1: dict(block_r=16, num_warps=4), 2: dict(block_r=8, num_warps=2)}
    synth = Synthesizer(checkpoint)
    inputs = two_streams(synth)
    for launch, table in ((k_loop, False), (whole_rows, True)):
        code_predictor.GEMV_LAUNCH = launch
        codes = []
        for fused_o in (False, True):
            options = FastPathOptions(talker_gemv_rows=0, cp_gemv_rows=4, cp_qkv_table=table,
                                      cp_attention_o=fused_o)
            d = small_driver(synth, options)
            cp = d.runner.code_predictor
            start_streams(d, inputs)
            o_products.clear()
            for _ in range(2):
                d.step([2, 0])
                assert not cp.o_sum.any(), "the o sum is not zero after a frame"
            # 2 frames x 15 passes x 2 layers
            assert len(o_products) == (0 if fused_o else 60), f"{len(o_products)} o products, fused {fused_o}"
            codes.append(stream_codes(d))
        assert_streams_equal(codes[1], codes[0], f"with attention + o, {'whole-row' if table else 'K-loop'} GEMVs")
    print("OK")


def test_cp_attention_o_gives_the_codes_of_attention_then_o(tiny_checkpoint):
    run_interpreted(f"check_cp_attention_o_interpreted({str(tiny_checkpoint)!r})", timeout=900,
                     module="tests.runtime.test_cp_attention_o")


def test_cp_attention_o_does_nothing_where_the_passes_it_replaces_do_not_run():
    """On by default, it must not refuse options that turn off what it fuses (the fused attention, the GEMV
    passes): those validate, and then the passes run as before."""
    for off in (dict(cp_fused_attention=False), dict(cp_gemv_rows=0)):
        assert FastPathOptions(**off).validate().cp_attention_o
