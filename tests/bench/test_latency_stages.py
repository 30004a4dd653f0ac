"""bench.latency's stage timings and the opt-in variants beside them: which variants run at which
batch, under which settings, named how, and that every setting is restored, on the stand-in runner that records
what it was called with (tests/bench/stand_in.py). The experiments' A/Bs: tests/bench/test_latency_experiments.py."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from bench import latency, latency_stages, stages
from tests.bench.stand_in import StandInRunner, fake_timing


def test_batch_the_gemvs_serve_times_cublas_and_attention_v3_beside_the_default(monkeypatch):
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
    out = latency_stages._stage_times_at(runner, 1, 11)
    assert set(out) == {"talker_step_ms", "talker_step_long_ms", "code_predictor_frame_ms", "frame_step_ms",
                        "frame_step_general_sampler_ms", "talker_step_attn3_ms", "talker_step_long_attn3_ms",
                        "frame_step_attn3_ms", "talker_step_tgemv_ms", "talker_step_long_tgemv_ms",
                        "frame_step_tgemv_ms", "code_predictor_frame_cublas_ms", "frame_step_cublas_ms"}
    assert ("talker", 3, 0) in runner.calls and ("talker", 2, 2) in runner.calls  # the variants' settings
    assert ("cp", 0, 0, False) in runner.calls
    assert runner.attention_version == 2 and runner.code_predictor.gemv_rows == 2  # restored
    assert runner.talker_gemv_rows == 0


def test_with_the_talker_gemvs_on_their_cublas_steps_are_timed_beside(monkeypatch):
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2, talker_gemv_rows=1)
    out = latency_stages._stage_times_at(runner, 1, 11)
    assert "talker_step_talker_cublas_ms" in out and "frame_step_talker_cublas_ms" in out
    assert "talker_step_tgemv_ms" not in out
    assert ("talker", 2, 0) in runner.calls and runner.talker_gemv_rows == 1
    assert "talker_step_tgemv_ms" not in latency_stages._stage_times_at(runner, 8, 11)


def test_larger_batches_time_the_tensor_core_kernel_and_a_failure_is_reported(monkeypatch):
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)

    def predict(*a, **k):
        if runner.code_predictor.mma_rows:
            raise RuntimeError("no kernel")

    runner.code_predictor.predict = predict
    out = latency_stages._stage_times_at(runner, 8, 11)
    assert "code_predictor_frame_cublas_ms" not in out and out["mma_error"] == "RuntimeError: no kernel"
    assert runner.code_predictor.mma_rows == 0


def test_host_times_times_each_call_of_a_new_stream():
    """On CPU (no graphs) the calls run their work eagerly; what is checked is that each is timed and
    that the runner is left usable (the frame steps ran against the prefilled slot)."""
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.runner import ModelRunner

    _, model = random_model("tiny", torch.float32, "cpu", seed=0)
    runner = ModelRunner(model, max_slots=8, max_context=64, buckets=(1, 8))
    out = latency.host_times(runner, reps=3)
    assert out["graphs"] is False and out["prompt_rows"] == 22
    for key in ("prefill_prompt_us", "embed_prompt_eager_us", "start_slot_us", "frame_step_b1_us",
                "frame_step_b8_us"):
        assert out[key] > 0, key
    assert runner.logits[0].abs().sum() > 0  # the prefill wrote slot 0's logits


def test_the_talkers_pdl_variants_time_pdl_and_whole_rows_apart(monkeypatch):
    """Five variants beside the default (PDL off): PDL with its whole-row table, PDL over the sliced
    table and over the mixed one, the whole-row table without PDL, PDL with the attention's early
    loads; each step called under its settings, all restored."""
    from tts_engine.runtime.talker_launch import TALKER_GEMV_LAUNCH, TALKER_PDL_LAUNCH, TALKER_PDL_MIXED

    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2, talker_gemv_rows=1)
    runner.talker_pdl, runner.talker_launch, runner.talker_pdl_launch = False, TALKER_GEMV_LAUNCH, TALKER_PDL_LAUNCH
    runner.talker_attention_early, runner.talker_attention_splits = False, None
    seen, early, splits = [], [], []

    def decode(*a):
        seen.append((runner.talker_pdl, runner.talker_launch, runner.talker_pdl_launch))
        early.append((runner.talker_pdl, runner.talker_attention_early))
        splits.append(runner.talker_attention_splits)

    runner._talker_decode = decode
    fns = stages.stage_fns(runner, 1, 11)
    out = latency_stages.talker_pdl_times(runner, fns)
    assert (True, True) in early and (False, True) not in early and runner.talker_attention_early is False
    assert set(out) == {f"{stage}_{name}_ms" for stage in ("talker_step", "talker_step_long", "frame_step")
                        for name in ("tpdl", "tpdl_sliced", "tpdl_mixed", "trows", "tpdl_early", "tsplit1")}
    assert 1 in splits and runner.talker_attention_splits is None
    launched = [(pdl, (pdl_launch if pdl else launch)["qkv"]) for pdl, launch, pdl_launch in seen]
    assert (True, TALKER_PDL_LAUNCH["qkv"]) in launched  # whole rows with PDL
    assert (True, {**TALKER_GEMV_LAUNCH["qkv"], "pdl": True}) in launched  # sliced with PDL
    assert (False, {**TALKER_PDL_LAUNCH["qkv"], "pdl": False}) in launched  # whole rows without
    assert (True, TALKER_PDL_MIXED["qkv"]) in launched and TALKER_PDL_MIXED["qkv"] != TALKER_PDL_LAUNCH["qkv"]
    assert TALKER_PDL_LAUNCH["qkv"]["whole_rows"] and "whole_rows" not in TALKER_GEMV_LAUNCH["qkv"]
    assert (runner.talker_pdl, runner.talker_launch, runner.talker_pdl_launch) == (
        False, TALKER_GEMV_LAUNCH, TALKER_PDL_LAUNCH)
    runner.talker_pdl = True
    assert "talker_step_notpdl_ms" in latency_stages.talker_pdl_times(runner, fns)


def test_the_code_predictors_attention_variants_toggle_the_setting_its_batch_uses(monkeypatch):
    """At a batch whose passes run with PDL the PDL passes' setting is toggled, elsewhere the other; the
    fused kernel with 1, 2, 4 and 8 warps at each; every setting restored."""
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
    cp = runner.code_predictor
    cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps = True, False, 4
    cp.uses_pdl = lambda rows: rows <= 2
    seen = []
    cp.predict = lambda *a, **k: seen.append((cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps))
    out = latency_stages.cp_attention_times(runner, {1: {}, 8: {}}, 11)
    names = ("cp{}", "cpfused_w1", "cpfused_w2", "cpfused_w4", "cpfused_w8")
    assert set(out[1]) == {f"{stage}_{n.format('fusedpdl')}_ms" for stage in ("code_predictor_frame", "frame_step")
                           for n in names}
    assert set(out[8]) == {f"{stage}_{n.format('unfused')}_ms" for stage in ("code_predictor_frame", "frame_step")
                           for n in names}
    assert (True, True, 4) in seen and (False, False, 4) in seen  # batch 1 fused with PDL; batch 8 unfused
    assert (True, True, 1) in seen and (True, False, 8) in seen
    assert (cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps) == (True, False, 4)


def test_prefill_times_the_tensor_core_products_beside_cublas_and_restores_the_setting(monkeypatch):
    """Graphs captured under each setting and timed under it; "_mma" only for prompts it takes."""
    fake_timing(monkeypatch)
    captured, prefilled = [], []
    runner = SimpleNamespace(use_triton=True, prefill_mma_rows=0, prefill_graphs={})

    def capture():
        captured.append(runner.prefill_mma_rows)
        runner.prefill_graphs = {"setting": runner.prefill_mma_rows}

    runner.capture_prefill_graphs = capture
    runner.prefill_prompt = lambda slot, text, codec: prefilled.append(
        (len(text), runner.prefill_mma_rows, runner.prefill_graphs.get("setting")))
    out = latency.prefill_times(runner, lengths=(12, 40, 120))
    assert set(out) == {f"prefill_{t}_{way}_ms" for t in (12, 40, 120) for way in ("eager", "graph")} | {
        f"prefill_{t}_{way}_mma_ms" for t in (12, 40) for way in ("eager", "graph")}
    assert captured == [0, 64]
    assert (40, 64, 64) in prefilled and (40, 64, None) in prefilled  # graph and eager, both with mma
    assert not [p for p in prefilled if p[0] == 120 and p[1]]
    assert runner.prefill_mma_rows == 0
    runner.use_triton = False
    assert not [k for k in latency.prefill_times(runner, lengths=(12,)) if "mma" in k]


def test_pdl_launch_from_a_step_sweep_merges_each_products_best_onto_the_defaults(monkeypatch):
    """bench.latency --pdl-launch-from: the sweep's best entries replace those keys of each product's
    default (whole_rows and pdl kept); products the sweep did not name keep their default."""
    import tts_engine.runtime.code_predictor as cp_module

    monkeypatch.setattr(cp_module, "PDL_LAUNCH", {"qkv": dict(block_n=4, num_warps=4, whole_rows=True, pdl=True),
                                                  "head": dict(block_n=2, num_warps=8, whole_rows=True, pdl=True)})
    runner = SimpleNamespace(talker_pdl_launch={"o": dict(block_n=2, num_warps=2, whole_rows=True, pdl=True),
                                                "down": dict(block_n=4, num_warps=4, whole_rows=True, pdl=True)})
    # the talker swept in two stages (its stream stage faster), the code predictor in one
    sweep = {"talker": {"best": {"o": dict(block_n=16, num_warps=8)}, "best_ms": 1.2},
             "talker_stream": {"best": {"o": dict(block_n=2, num_warps=8, row_blocks=4)}, "best_ms": 1.1},
             "cp": {"best": {"head": dict(num_warps=4)}, "best_ms": 1.5}}
    got = latency_stages.pdl_launch_from(runner, sweep)
    assert runner.talker_pdl_launch["o"] == dict(block_n=2, num_warps=8, row_blocks=4, whole_rows=True, pdl=True)
    assert runner.talker_pdl_launch["down"] == dict(block_n=4, num_warps=4, whole_rows=True, pdl=True)
    assert cp_module.PDL_LAUNCH["head"] == dict(block_n=2, num_warps=4, whole_rows=True, pdl=True)
    assert cp_module.PDL_LAUNCH["qkv"]["block_n"] == 4 and got["cp"]["head"]["num_warps"] == 4
    sweep["talker_stream"]["best_ms"] = 1.3  # slower than the talker stage's: that one's table
    runner.talker_pdl_launch = {"o": dict(block_n=2, num_warps=2, whole_rows=True, pdl=True)}
    latency_stages.pdl_launch_from(runner, sweep)
    assert runner.talker_pdl_launch["o"]["block_n"] == 16 and "row_blocks" not in runner.talker_pdl_launch["o"]


def test_pdl_launch_from_judges_stages_by_their_interleaved_pairs(monkeypatch):
    """A stage's interleaved pairs, not its sweep's best_ms (which rides the sweep's drift), pick among stages,
    and a stage whose best lost its pairs to the default is not installed (run 22's cp_stream)."""
    import tts_engine.runtime.code_predictor as cp_module

    monkeypatch.setattr(cp_module, "PDL_LAUNCH", {"o": dict(block_n=4, num_warps=4, whole_rows=True, pdl=True)})
    runner = SimpleNamespace(talker_pdl_launch={"o": dict(block_n=2, num_warps=2, whole_rows=True, pdl=True)})
    sweep = {"cp_stream": {"best": {"o": dict(num_warps=8, row_blocks=2)}, "best_ms": 1.48,
                           "interleaved_ms": {"default": [1.507, 1.503, 1.508], "best": [1.565, 1.566, 1.563]}},
             "talker_stream": {"best": {"o": dict(block_n=4)}, "best_ms": 1.00,
                               "interleaved_ms": {"default": [1.08, 1.08, 1.08], "best": [1.05, 1.06, 1.05]}},
             "talker_fine": {"best": {"o": dict(block_n=8)}, "best_ms": 1.03,
                             "interleaved_ms": {"default": [1.08, 1.08, 1.08], "best": [0.94, 0.94, 0.95]}}}
    latency_stages.pdl_launch_from(runner, sweep)
    assert cp_module.PDL_LAUNCH["o"] == dict(block_n=4, num_warps=4, whole_rows=True, pdl=True)  # kept: it lost
    assert runner.talker_pdl_launch["o"]["block_n"] == 8  # the fine stage: faster pairs, slower best_ms


def test_the_talker_stages_run_the_attention_a_step_at_their_position_would(monkeypatch):
    """The short-context stages of a GEMV step take kernels/talker_attention.py, the 448-position one and
    larger batches the split attention; the fused attention's variants at every context against none, each
    under its own launch; every setting restored."""
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2, talker_gemv_rows=1)
    seen = []
    runner._talker_decode = lambda *a: seen.append((runner.talker_qk_attention, runner.talker_qk_attention_launch))
    fns = stages.stage_fns(runner, 1, 11)
    fns["talker_step"]()
    fns["talker_step_long"]()
    stages.stage_fns(runner, 8, 11)["talker_step"]()
    assert [fused for fused, _ in seen] == [True, False, False]
    seen.clear()
    out = latency_stages.talker_qk_attention_times(runner, fns, rounds=2)
    assert set(out) == {f"{stage}_{name}_ms" for stage in ("talker_step", "talker_step_long")
                        for name in ("tqkbase", *latency_stages.QK_ATTENTION_VARIANTS)}
    assert seen.count((False, {})) == 4  # tqkbase: two stages, two rounds
    assert (True, {"num_warps": 4}) in seen and (True, {"dot": False}) in seen
    assert (True, {}) in seen  # "tqkattn": the runner's own launch, at both contexts
    assert (runner.qk_attention_context, runner.talker_qk_attention_launch) == (256, {})


def test_an_unknown_experiment_is_refused_before_anything_loads(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        latency.main(["--model", str(tmp_path), "--out", str(tmp_path / "out.json"), "--experiments",
                      "row_chunks,nope"])
    assert exit_info.value.code == 2 and "unknown nope" in capsys.readouterr().err


def test_weight_floors_of_the_real_configs_are_the_bytes_their_steps_read():
    """Issue 3's floors from the model's own weights (built on the meta device: no memory): the 1.7B talker step
    reads 2.83 GB and the code-predictor frame 15 x 157 MB + 63 MB (docs/perf-notes.md), the 0.6B's less."""
    from pathlib import Path

    import tts_engine
    from tts_engine.config import ModelConfig
    from tts_engine.model.qwen3_tts import Qwen3TTS

    configs = Path(tts_engine.__file__).parent / "configs"
    floors = {}
    for size in ("1.7b", "0.6b"):
        with torch.device("meta"):
            model = Qwen3TTS(ModelConfig.from_file(configs / f"{size}-customvoice.config.json"))
        floors[size] = latency.weight_floors(model, 1.0)  # at 1 TB/s: ms = GB
    talker, frame = floors["1.7b"]["floor_talker_step_ms"], floors["1.7b"]["floor_code_predictor_frame_ms"]
    assert 2.80 < talker < 2.86 and 2.40 < frame < 2.44, floors
    assert floors["0.6b"]["floor_talker_step_ms"] < talker / 2
