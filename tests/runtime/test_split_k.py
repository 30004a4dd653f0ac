"""The cuBLAS steps' products as split-K partials summed by the launch after them (`fused.SplitK`: the talker's
`talker_split_k`, the code predictor's `split_k`) against cuBLAS' own products, on CPU through Triton's interpreter
(in a subprocess: tests/runtime/driver.py says why)."""

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


def check_split_k_interpreted(checkpoint: str) -> None:
    """Runs in the subprocess: two frames of two streams on the cuBLAS steps give the same codes, hidden states and
    logits with the down products in 2 split-K partials, and with o, gate/up and down in 2, 4 and 4, as with cuBLAS'
    whole products, and so do the prompts' prefills; the split products are the ones that ran (the prefills', then
    the talker's and the code predictor's, every layer of every step and pass)."""
    torch.set_num_threads(1)
    assert_interpreted()
    from tts_engine.runtime import fused
    from tts_engine.runtime.fused import SplitK

    split_products = []  # (rows, splits, weight shape) of each split-K product

    def counted(x, w, splits):
        split_products.append((x.shape[0], splits, tuple(w.shape)))
        return split_k_partials(x, w, splits)
    split_k_partials, fused.split_k_partials = fused.split_k_partials, counted
    synth = Synthesizer(checkpoint)
    inputs = two_streams(synth)
    options = FastPathOptions(talker_gemv_rows=0, cp_gemv_rows=0)

    def expected(stack, rows: int, split: SplitK) -> list:  # a pass of `rows` rows through `stack`'s layers
        return [(rows, s, tuple(w.shape)) for layer in stack.layers
                for s, w in ((split.o, layer.w_o), (split.gate_up, layer.w_gate_up), (split.down, layer.w_down)) if s]

    splits = (SplitK(), SplitK(down=2), SplitK(o=2, gate_up=4, down=4))
    results = []
    for split in splits:
        d = small_driver(synth, options)
        r = d.runner
        r.talker_split_k = r.code_predictor.split_k = r.prefill_split_k = split
        split_products.clear()
        start_streams(d, inputs)
        # the prompts' prefills (eager here): every layer's products of each prompt's rows
        prompts = [len(inputs[0].prompt), len(inputs[1].prompt)]
        assert split_products == [p for n in prompts for p in expected(r.talker, n, split)], f"prefill {split}"
        prefilled = (r.hidden[[2, 0]].clone(), r.logits[[2, 0]].clone(), r.k_cache[:, [2, 0]].clone())
        split_products.clear()
        for _ in range(2):
            d.step([2, 0])
        cp = r.code_predictor.stack
        # a step: the code predictor's frame (its prefill pass of 4 rows, 14 passes of 2), then the talker's 2 rows
        frame = expected(cp, 4, split) + expected(cp, 2, split) * 14 + expected(r.talker, 2, split)
        assert split_products == frame * 2, f"{split}: {split_products}"
        results.append((stream_codes(d), r.hidden[[2, 0]].clone(), r.logits[[2, 0]].clone(), prefilled))
    (a_codes, ah, al, a_prefilled) = results[0]
    for split, (b_codes, bh, bl, b_prefilled) in zip(splits[1:], results[1:], strict=True):
        for name, got, want in zip(("hidden", "logits", "keys"), b_prefilled, a_prefilled, strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m, n=name: f"prefill {n}: {m}")
        assert_streams_equal(b_codes, a_codes, f"with {split}")
        torch.testing.assert_close(bh, ah, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(bl, al, atol=1e-4, rtol=1e-4)
    print("OK")


def test_split_k_products_give_the_codes_of_the_whole_products(tiny_checkpoint):
    run_interpreted(f"check_split_k_interpreted({str(tiny_checkpoint)!r})", timeout=900,
                     module="tests.runtime.test_split_k")
