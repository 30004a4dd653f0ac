"""The cuBLAS steps' down products as split-K partials summed by the next norm (`fused.decoder_step_triton`'s
down_splits: the talker's `talker_down_splits`, the code predictor's `down_splits`) against cuBLAS' own product, on
CPU through Triton's interpreter (in a subprocess: tests/runtime/test_fast_path.py says why)."""

from __future__ import annotations

import torch

from tests.runtime.test_fast_path import (
    GREEDY,
    SAMPLED,
    Driver,
    _assert_interpreted,
    _run_interpreted,
    assert_codes_equal,
    make_input,
)
from tts_engine.prompt import Layout
from tts_engine.runtime.options import FastPathOptions
from tts_engine.runtime.runner import ModelRunner
from tts_engine.synthesizer import Synthesizer


def check_split_k_down_interpreted(checkpoint: str) -> None:
    """Runs in the subprocess: two frames of two streams on the cuBLAS steps give the same codes, hidden states and
    logits with every down product as 2 or 4 split-K partials as with the whole product, and the split products
    are the ones that ran (talker and code predictor, every layer of every step and pass)."""
    torch.set_num_threads(1)
    _assert_interpreted()
    from tts_engine.runtime import fused

    split_products = []  # (rows, splits) of each split-K down product

    def counted(x, w, splits):
        split_products.append((x.shape[0], splits))
        return split_k(x, w, splits)
    split_k, fused.split_k_partials = fused.split_k_partials, counted
    synth = Synthesizer(checkpoint)
    inputs = [make_input(synth, "Hi there.", Layout.STREAMING, SAMPLED, frames=2),
              make_input(synth, "Greedy one", Layout.NON_STREAMING, GREEDY, voice="vivian", frames=2)]
    options = FastPathOptions(talker_gemv_rows=0, cp_gemv_rows=0, attention_version=2)
    results = []
    for splits in (0, 2, 4):
        d = Driver(ModelRunner(synth.model, max_slots=4, max_context=32, use_triton=True, use_graphs=False,
                               options=options))
        r = d.runner
        r.talker_down_splits = r.code_predictor.down_splits = splits
        d.start(2, inputs[0])
        d.start(0, inputs[1])
        split_products.clear()
        for _ in range(2):
            d.step([2, 0])
        talker_layers, cp_layers = len(r.talker.layers), len(r.code_predictor.stack.layers)
        # a step: the code predictor's frame (its prefill pass of 4 rows, 14 passes of 2), then the talker's 2 rows
        frame = [(4, splits)] * cp_layers + [(2, splits)] * (14 * cp_layers) + [(2, splits)] * talker_layers
        assert split_products == (frame * 2 if splits else []), f"{splits} splits: {split_products}"
        results.append((d.codes(2), d.codes(0), r.hidden[[2, 0]].clone(), r.logits[[2, 0]].clone()))
    (a2, a0, ah, al) = results[0]
    for splits, (b2, b0, bh, bl) in zip((2, 4), results[1:], strict=True):
        assert_codes_equal(b2, a2, f"slot 2 with down in {splits} split-K partials")
        assert_codes_equal(b0, a0, f"slot 0 with down in {splits} split-K partials")
        torch.testing.assert_close(bh, ah, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(bl, al, atol=1e-4, rtol=1e-4)
    print("OK")


def test_split_k_down_gives_the_codes_of_the_whole_product(tiny_checkpoint):
    _run_interpreted(f"check_split_k_down_interpreted({str(tiny_checkpoint)!r})", timeout=600,
                     module="tests.runtime.test_split_k_down")
