"""The code predictor's first-layer qkv table (FastPathOptions.cp_qkv_table) against the product its passes
launch, on CPU through Triton's interpreter (in a subprocess: tests/runtime/driver.py says why)."""

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


def check_cp_qkv_table_interpreted(checkpoint: str) -> None:
    """Runs in the subprocess: the code predictor's first-layer qkv table (FastPathOptions.cp_qkv_table) gives
    the codes of the passes that make that product, on its GEMV passes and on its cuBLAS ones; with it the
    layer's qkv product runs only in each frame's two-position prefill (pass 0), not in passes 1-14; its rows
    equal the product the GEMV path makes."""
    torch.set_num_threads(1)
    assert_interpreted()
    from types import SimpleNamespace

    import torch.nn.functional as F

    from tts_engine.kernels.gemv import gemv as gemv_kernel
    from tts_engine.runtime import code_predictor, fused

    wide = {name: dict(block_n=64, block_k=16) for name in ("qkv", "o", "gate_up", "down", "head")}
    code_predictor.GEMV_LAUNCH = wide
    products = []  # the first code-predictor layer's qkv products, by their rows

    def counted(fn):
        def run(x, w, *a, **k):
            if first_w is not None and w is first_w:
                products.append(x.shape[0])
            return fn(x, w, *a, **k)
        return run
    fused.gemv = counted(gemv_kernel)
    fused.F = SimpleNamespace(**{n: getattr(F, n) for n in ("silu",)}, linear=counted(F.linear))
    synth = Synthesizer(checkpoint)
    inputs = two_streams(synth)
    first_w = None
    for cp_rows in (4, 0):  # the code predictor's GEMV passes (decoder_step_gemv), its cuBLAS ones
        codes = []
        for table in (False, True):
            options = FastPathOptions(talker_gemv_rows=0, cp_gemv_rows=cp_rows,
                                      cp_qkv_table=table)
            d = small_driver(synth, options)
            cp = d.runner.code_predictor
            first_w = cp.stack.layers[0].w_qkv
            assert (cp.qkv_table is not None) == table
            start_streams(d, inputs)
            products.clear()
            for _ in range(2):
                d.step([2, 0])
            # 2 frames of 2 rows: pass 0 prefills 2 positions a row (4 rows), passes 1-14 one (2 rows)
            assert products == ([4] * 2 if table else [4, *[2] * 14] * 2), f"products {products}, table {table}"
            codes.append(stream_codes(d))
        assert_streams_equal(codes[1], codes[0], f"with the qkv table, cp_gemv_rows {cp_rows}")
    layer = cp.stack.layers[0]
    for j, c in ((0, 5), (13, 2047)):
        want = gemv_kernel(cp.inputs[j][c][None], layer.w_qkv, norm=(layer.ln_in, cp.stack.eps), **wide["qkv"])[0]
        torch.testing.assert_close(cp.qkv_table[j, c], want, atol=1e-5, rtol=1e-5)
    print("OK")


def test_cp_qkv_table_gives_the_codes_of_the_launched_product(tiny_checkpoint):
    run_interpreted(f"check_cp_qkv_table_interpreted({str(tiny_checkpoint)!r})", timeout=900,
                     module="tests.runtime.test_cp_qkv_table")
