"""FastPathOptions: each bad value named with what is wrong, before any model is loaded."""

from __future__ import annotations

import pytest

from tts_engine.runtime.options import FastPathOptions


def test_defaults_are_valid():
    assert FastPathOptions().validate() == FastPathOptions()


@pytest.mark.parametrize("options,field", [
    (FastPathOptions(talker_gemv_rows=5), "talker_gemv_rows"),
    (FastPathOptions(cp_gemv_rows=-1), "cp_gemv_rows"),
    (FastPathOptions(cp_gemv_rows=2, cp_mma_rows=2), "cp_mma_rows"),
    (FastPathOptions(cp_mma_rows=65), "cp_mma_rows"),
    (FastPathOptions(cp_gemv_rows=0, cp_pdl=True), "cp_pdl"),
    (FastPathOptions(talker_gemv_rows=0, talker_pdl=True), "talker_pdl"),
    (FastPathOptions(attention_version=1), "attention_version"),
    (FastPathOptions(prefill_mma_rows=65), "prefill_mma_rows"),
    (FastPathOptions(prefill_mma_rows=-1), "prefill_mma_rows"),
    (FastPathOptions(cp_down_splits=17), "cp_down_splits"),
    (FastPathOptions(talker_down_splits=-1), "talker_down_splits"),
    (FastPathOptions(cp_o_splits=17), "cp_o_splits"),
    (FastPathOptions(talker_o_splits=-1), "talker_o_splits"),
])
def test_each_bad_value_is_named(options, field):
    assert [name for name, _ in options.problems()] == [field]
    with pytest.raises(ValueError, match=f"^{field} "):
        options.validate()


def test_several_problems_are_reported_together():
    options = FastPathOptions(talker_gemv_rows=9, attention_version=4)
    assert [name for name, _ in options.problems()] == ["talker_gemv_rows", "attention_version"]


def test_prefill_mma_rows_stop_at_one_tensor_core_tile():
    from tts_engine.kernels.gemv import MAX_MMA_ROWS
    from tts_engine.runtime.options import MAX_PREFILL_MMA_ROWS

    assert MAX_PREFILL_MMA_ROWS == MAX_MMA_ROWS
    assert FastPathOptions(prefill_mma_rows=MAX_MMA_ROWS).problems() == []


def test_split_k_must_cut_the_models_products_evenly(tiny_checkpoint):
    """Checked against the model when the runner is made (the options do not know it): a split count that does
    not divide its product's K (down: the intermediate size, o: heads x head dim) is refused with the option's
    name; 0 (cuBLAS' own product) always serves."""
    from types import SimpleNamespace

    from tts_engine.runtime.fused import SplitK
    from tts_engine.runtime.options import split_k_for
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.synthesizer import Synthesizer

    stack = SimpleNamespace(intermediate=3072, q_size=2048)
    assert split_k_for(stack, 4, 2, ("d", "o")) == SplitK(o=2, down=4)
    assert split_k_for(stack, 0, 0, ("d", "o")) == SplitK()
    with pytest.raises(ValueError, match="cp_down_splits 5 must divide the intermediate size 3072"):
        split_k_for(stack, 5, 0, ("cp_down_splits", "cp_o_splits"))
    with pytest.raises(ValueError, match=r"cp_o_splits 3 must divide the attention width \(heads x head dim\) 2048"):
        split_k_for(stack, 4, 3, ("cp_down_splits", "cp_o_splits"))
    model = Synthesizer(tiny_checkpoint).model  # intermediate sizes: talker 128, code predictor 64
    for field in ("cp_down_splits", "talker_down_splits", "cp_o_splits", "talker_o_splits"):
        with pytest.raises(ValueError, match=f"^{field} 3 must divide"):
            ModelRunner(model, max_slots=2, max_context=32, use_triton=True, use_graphs=False,
                        options=FastPathOptions(**{field: 3}))


def test_split_k_stays_off_on_a_gpu_whose_torch_has_no_fp32_output_bmm(monkeypatch, caplog):
    """`split_k_partials` needs torch.bmm's fp32 output on a GPU: where this torch has none, the splits asked for
    (the defaults among them) fall back to cuBLAS' products with a warning, rather than failing at the first step;
    on CPU (which widens the operands itself) and where the torch has it, they stay."""
    import logging
    from types import SimpleNamespace

    from tts_engine.kernels import rms_norm
    from tts_engine.runtime.fused import SplitK
    from tts_engine.runtime.options import split_k_for

    stack = SimpleNamespace(intermediate=3072, q_size=2048)
    names = ("cp_down_splits", "cp_o_splits")
    assert rms_norm.bmm_has_fp32_out()  # this machine's torch
    assert split_k_for(stack, 4, 4, names, "cuda") == SplitK(o=4, down=4)
    monkeypatch.setattr(rms_norm, "bmm_has_fp32_out", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert split_k_for(stack, 4, 4, names, "cuda") == SplitK()
    assert "no fp32-output bmm" in caplog.text and "cp_down_splits" in caplog.text
    assert split_k_for(stack, 4, 4, names, "cpu") == SplitK(o=4, down=4)
    assert split_k_for(stack, 0, 0, names, "cuda") == SplitK()
