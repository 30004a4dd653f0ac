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


def test_down_splits_must_cut_the_models_intermediate_size_evenly(tiny_checkpoint):
    """Checked against the model when the runner is made (the options do not know it): a split count that does
    not divide the intermediate size is refused with the option's name; 0 (cuBLAS' own product) always serves."""
    from tts_engine.runtime.options import down_splits_for
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.synthesizer import Synthesizer

    assert down_splits_for(4, 3072, "cp_down_splits") == 4 and down_splits_for(0, 3072, "x") == 0
    with pytest.raises(ValueError, match="cp_down_splits 5 must divide the intermediate size 3072"):
        down_splits_for(5, 3072, "cp_down_splits")
    model = Synthesizer(tiny_checkpoint).model  # intermediate sizes: talker 128, code predictor 64
    for field in ("cp_down_splits", "talker_down_splits"):
        with pytest.raises(ValueError, match=f"^{field} 3 must divide"):
            ModelRunner(model, max_slots=2, max_context=32, use_triton=True, use_graphs=False,
                        options=FastPathOptions(**{field: 3}))
