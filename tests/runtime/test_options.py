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
