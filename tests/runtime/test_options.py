"""FastPathOptions: each bad value named with what is wrong, before any model is loaded."""

from __future__ import annotations

import pytest

from tts_engine.runtime.options import FastPathOptions


def test_defaults_are_valid():
    assert FastPathOptions().validate() == FastPathOptions()


@pytest.mark.parametrize("options,field", [
    (FastPathOptions(talker_gemv_rows=5), "talker_gemv_rows"),
    (FastPathOptions(cp_gemv_rows=-1), "cp_gemv_rows"),
    (FastPathOptions(cp_gemv_rows=0, cp_pdl=True), "cp_pdl"),
    (FastPathOptions(talker_gemv_rows=0, talker_pdl=True), "talker_pdl"),
    (FastPathOptions(cp_gemv_rows=2, cp_pdl=False, cp_cuda_gemv=True), "cp_cuda_gemv"),
    (FastPathOptions(talker_qk_attention_context=-1), "talker_qk_attention_context"),
    (FastPathOptions(codec_window_max=-1), "codec_window_max"),
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
    options = FastPathOptions(talker_gemv_rows=9, codec_window_max=-4)
    assert [name for name, _ in options.problems()] == ["talker_gemv_rows", "codec_window_max"]


def test_the_runners_take_their_defaults_from_the_options_object(tiny_checkpoint):
    """One place for the kernel defaults: a runner built with no options and one built with FastPathOptions()
    make the same choices (the code predictor's own included), and a code-predictor runner made on its own
    takes them too."""
    from tts_engine.runtime.code_predictor import CodePredictorRunner
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.synthesizer import Synthesizer

    model = Synthesizer(tiny_checkpoint).model
    kw = dict(max_slots=2, max_context=32, use_triton=True, use_graphs=False)
    a, b = ModelRunner(model, **kw), ModelRunner(model, **kw, options=FastPathOptions())
    alone = CodePredictorRunner(model.talker, model.talker.model.codec_embedding.weight, 2, use_triton=True)
    choices = ("gemv_rows", "fused_attention", "attention_o", "early_trigger", "rows_pdl", "rows_early", "split_k")
    for cp in (b.code_predictor, alone):
        assert [getattr(cp, n) for n in choices] == [getattr(a.code_predictor, n) for n in choices]
        assert (cp.qkv_table is None) == (a.code_predictor.qkv_table is None)
    d = FastPathOptions()
    assert a.code_predictor.qkv_table is not None and a.code_predictor.attention_o and a.code_predictor.rows_pdl
    assert a.code_predictor.gemv_rows == d.cp_gemv_rows and a.talker_gemv_rows == d.talker_gemv_rows
    assert a.qk_attention_context == d.talker_qk_attention_context


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
