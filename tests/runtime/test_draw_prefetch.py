"""The code predictor's draws that bring the next pass's first weights into L2 (`CodePredictorRunner.draw_prefetch`)
against the draws without, on CPU through Triton's interpreter (in a subprocess: tests/runtime/test_fast_path.py
says why), where a plain read of each line stands in for the prefetch."""

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


def check_draw_prefetch_interpreted(checkpoint: str) -> None:
    """Runs in the subprocess: two frames of two streams give the same codes with every draw but each frame's last
    prefetching the first 3 of the next pass's weights (the GEMV passes and the cuBLAS ones); the draws were asked
    for exactly those tensors."""
    torch.set_num_threads(1)
    assert_interpreted()
    from tts_engine.runtime import code_predictor

    asked = []  # the prefetch of each code-predictor draw
    draw = code_predictor.sample_rows

    def recorded(*a, prefetch=(), **k):
        asked.append(tuple(prefetch))
        return draw(*a, prefetch=prefetch, **k)
    code_predictor.sample_rows = recorded
    code_predictor.GEMV_LAUNCH = {name: dict(block_n=64, block_k=16) for name in ("qkv", "o", "gate_up", "down",
                                                                                   "head")}
    synth = Synthesizer(checkpoint)
    inputs = two_streams(synth)
    for cp_rows in (4, 0):  # the GEMV passes, the cuBLAS ones
        codes = []
        for n in (0, 3):
            options = FastPathOptions(talker_gemv_rows=0, cp_gemv_rows=cp_rows, attention_version=2)
            d = small_driver(synth, options)
            cp = d.runner.code_predictor
            cp.draw_prefetch = n
            start_streams(d, inputs)
            asked.clear()
            for _ in range(2):
                d.step([2, 0])
            want = cp.prefetch_weights[:n]
            assert len(asked) == 30 and all(p == () for p in asked[14::15]), "the last draw of a frame prefetches"
            assert all(len(p) == n and all(a is b for a, b in zip(p, want)) for i, p in enumerate(asked)
                       if i % 15 != 14), f"draw_prefetch {n}: {[len(p) for p in asked]}"
            codes.append(stream_codes(d))
        assert_streams_equal(codes[1], codes[0], f"with the draws prefetching, cp_gemv_rows {cp_rows}")
    print("OK")


def test_draws_that_prefetch_give_the_codes_without(tiny_checkpoint):
    run_interpreted(f"check_draw_prefetch_interpreted({str(tiny_checkpoint)!r})", timeout=600,
                     module="tests.runtime.test_draw_prefetch")
