"""bench.latency's stage timings and the opt-in variants beside them: which variants run at which
batch, under which settings, named how, and that every setting is restored. The runner here is a
stand-in that records what it was called with: the real stages need a GPU (CUDA graphs and events),
and their numbers are the GPU run's; this checks the bookkeeping around them on CPU."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from bench import latency, stages
from bench import latency_experiments as experiments


class _Runner:
    def __init__(self, gemv_rows: int, talker_gemv_rows: int = 0):
        self.device, self.max_context, self.use_triton, self.attention_version = torch.device("cpu"), 512, True, 2
        self.talker_gemv_rows = talker_gemv_rows
        self.qk_attention_context, self.talker_qk_attention, self.talker_qk_attention_launch = 256, False, {}
        self.hidden = torch.zeros(64, 8)
        self.rows = SimpleNamespace(gather=lambda slots: slots)
        self.calls = []
        cp = SimpleNamespace(gemv_rows=gemv_rows, mma_rows=0, pdl=False, use_triton=True)
        cp.predict = lambda *a, **k: self.calls.append(("cp", cp.gemv_rows, cp.mma_rows, cp.pdl))
        self.code_predictor = cp

    def qk_attention_serves(self, rows: int, max_position: int) -> bool:  # the runner's rule
        return rows <= self.talker_gemv_rows and max_position < self.qk_attention_context

    def _talker_decode(self, *a):
        self.calls.append(("talker", self.attention_version, self.talker_gemv_rows))

    def _frame_step(self, *a):
        self.calls.append(("step", self.attention_version, self.talker_gemv_rows, self.code_predictor.gemv_rows,
                           self.code_predictor.mma_rows))


def _timed(monkeypatch):
    for module in (latency, stages):  # the table's own timings, and the variants' (bench/stages.py)
        monkeypatch.setattr(module, "graph_of", lambda fn: fn)
        monkeypatch.setattr(module, "cuda_time_ms", lambda fn: fn() or 1.0)


def test_batch_the_gemvs_serve_times_cublas_and_attention_v3_beside_the_default(monkeypatch):
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    out = latency._stage_times_at(runner, 1, 11)
    assert set(out) == {"talker_step_ms", "talker_step_long_ms", "code_predictor_frame_ms", "frame_step_ms",
                        "frame_step_general_sampler_ms", "talker_step_attn3_ms", "talker_step_long_attn3_ms",
                        "frame_step_attn3_ms", "talker_step_tgemv_ms", "talker_step_long_tgemv_ms",
                        "frame_step_tgemv_ms", "code_predictor_frame_cublas_ms", "frame_step_cublas_ms"}
    assert ("talker", 3, 0) in runner.calls and ("talker", 2, 2) in runner.calls  # the variants' settings
    assert ("cp", 0, 0, False) in runner.calls
    assert runner.attention_version == 2 and runner.code_predictor.gemv_rows == 2  # restored
    assert runner.talker_gemv_rows == 0


def test_with_the_talker_gemvs_on_their_cublas_steps_are_timed_beside(monkeypatch):
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2, talker_gemv_rows=1)
    out = latency._stage_times_at(runner, 1, 11)
    assert "talker_step_talker_cublas_ms" in out and "frame_step_talker_cublas_ms" in out
    assert "talker_step_tgemv_ms" not in out
    assert ("talker", 2, 0) in runner.calls and runner.talker_gemv_rows == 1
    assert "talker_step_tgemv_ms" not in latency._stage_times_at(runner, 8, 11)


def test_larger_batches_time_the_tensor_core_kernel_and_a_failure_is_reported(monkeypatch):
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)

    def predict(*a, **k):
        if runner.code_predictor.mma_rows:
            raise RuntimeError("no kernel")

    runner.code_predictor.predict = predict
    out = latency._stage_times_at(runner, 8, 11)
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

    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2, talker_gemv_rows=1)
    runner.talker_pdl, runner.talker_launch, runner.talker_pdl_launch = False, TALKER_GEMV_LAUNCH, TALKER_PDL_LAUNCH
    runner.talker_attention_early, runner.talker_attention_splits = False, None
    seen, early, splits = [], [], []

    def decode(*a):
        seen.append((runner.talker_pdl, runner.talker_launch, runner.talker_pdl_launch))
        early.append((runner.talker_pdl, runner.talker_attention_early))
        splits.append(runner.talker_attention_splits)

    runner._talker_decode = decode
    fns = stages.stage_fns(runner, 1, 11)
    out = latency.talker_pdl_times(runner, fns)
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
    assert "talker_step_notpdl_ms" in latency.talker_pdl_times(runner, fns)


def test_the_code_predictors_attention_variants_toggle_the_setting_its_batch_uses(monkeypatch):
    """At a batch whose passes run with PDL the PDL passes' setting is toggled, elsewhere the other; the
    fused kernel with 1, 2, 4 and 8 warps at each; every setting restored."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    cp = runner.code_predictor
    cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps = True, False, 4
    cp.uses_pdl = lambda rows: rows <= 2
    seen = []
    cp.predict = lambda *a, **k: seen.append((cp.fused_attention, cp.fused_attention_pdl, cp.fused_attention_warps))
    out = latency.cp_attention_times(runner, {1: {}, 8: {}}, 11)
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
    _timed(monkeypatch)
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
    got = latency.pdl_launch_from(runner, sweep)
    assert runner.talker_pdl_launch["o"] == dict(block_n=2, num_warps=8, row_blocks=4, whole_rows=True, pdl=True)
    assert runner.talker_pdl_launch["down"] == dict(block_n=4, num_warps=4, whole_rows=True, pdl=True)
    assert cp_module.PDL_LAUNCH["head"] == dict(block_n=2, num_warps=4, whole_rows=True, pdl=True)
    assert cp_module.PDL_LAUNCH["qkv"]["block_n"] == 4 and got["cp"]["head"]["num_warps"] == 4
    sweep["talker_stream"]["best_ms"] = 1.3  # slower than the talker stage's: that one's table
    runner.talker_pdl_launch = {"o": dict(block_n=2, num_warps=2, whole_rows=True, pdl=True)}
    latency.pdl_launch_from(runner, sweep)
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
    latency.pdl_launch_from(runner, sweep)
    assert cp_module.PDL_LAUNCH["o"] == dict(block_n=4, num_warps=4, whole_rows=True, pdl=True)  # kept: it lost
    assert runner.talker_pdl_launch["o"]["block_n"] == 8  # the fine stage: faster pairs, slower best_ms


def test_the_talker_stages_run_the_attention_a_step_at_their_position_would(monkeypatch):
    """The short-context stages of a GEMV step take kernels/talker_attention.py, the 448-position one and
    larger batches the split attention; the fused attention's variants at every context against none, each
    under its own launch; every setting restored."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2, talker_gemv_rows=1)
    seen = []
    runner._talker_decode = lambda *a: seen.append((runner.talker_qk_attention, runner.talker_qk_attention_launch))
    fns = stages.stage_fns(runner, 1, 11)
    fns["talker_step"]()
    fns["talker_step_long"]()
    stages.stage_fns(runner, 8, 11)["talker_step"]()
    assert [fused for fused, _ in seen] == [True, False, False]
    seen.clear()
    out = latency.talker_qk_attention_times(runner, fns, rounds=2)
    assert set(out) == {f"{stage}_{name}_ms" for stage in ("talker_step", "talker_step_long")
                        for name in ("tqkbase", *latency.QK_ATTENTION_VARIANTS)}
    assert seen.count((False, {})) == 4  # tqkbase: two stages, two rounds
    assert (True, {"num_warps": 4}) in seen and (True, {"dot": False}) in seen
    assert (True, {}) in seen  # "tqkattn": the runner's own launch, at both contexts
    assert (runner.qk_attention_context, runner.talker_qk_attention_launch) == (256, {})


def test_the_context_sweep_times_each_launch_at_each_context_against_the_split_step(monkeypatch):
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2, talker_gemv_rows=1)
    seen = []
    runner._talker_decode = lambda slots, x, positions: seen.append(
        (int(positions[0]), runner.talker_qk_attention, dict(runner.talker_qk_attention_launch)))
    out = experiments.talker_context_times(runner, 11, contexts=(12, 300), rounds=1)
    assert set(out) == {"split", *experiments.CONTEXT_LAUNCHES} and set(out["split"]) == {12, 300}
    assert (11, False, {}) in seen and (299, False, {}) in seen  # the split step writes position context - 1
    assert (299, True, experiments.CONTEXT_LAUNCHES["w8b128"]) in seen
    assert runner.talker_qk_attention is False and runner.talker_qk_attention_launch == {}


def _pdl_tables(monkeypatch):
    """A stand-in runner with whole-row PDL tables for the talker and (patched in) the code predictor -> (runner,
    the tables' common entry by product, the code predictor's module)."""
    import tts_engine.runtime.code_predictor as cp_module

    _timed(monkeypatch)
    table = {name: dict(block_n=4, whole_rows=True, pdl=True) for name in ("qkv", "o", "gate_up", "down", "head")}
    monkeypatch.setattr(cp_module, "PDL_LAUNCH", dict(table))
    runner = _Runner(gemv_rows=2, talker_gemv_rows=1)
    runner.talker_pdl_launch = {name: table[name] for name in ("qkv", "o", "gate_up", "down")}
    return runner, table, cp_module


def test_residual_early_toggles_o_and_down_in_both_tables_and_restores_them(monkeypatch):
    runner, table, cp_module = _pdl_tables(monkeypatch)
    seen = []
    runner._talker_decode = lambda *a: seen.append(("talker", {k: v.get("residual_early") for k, v
                                                               in runner.talker_pdl_launch.items()}))
    runner.code_predictor.predict = lambda *a, **k: seen.append(
        ("cp", {k: v.get("residual_early") for k, v in cp_module.PDL_LAUNCH.items()}))
    out = experiments.residual_early_times(runner, 11, rounds=1)
    assert set(out) == {f"{stage}_{name}_ms" for stage in ("talker_step", "code_predictor_frame", "frame_step")
                        for name in ("resoff", "researly")}
    on = {"qkv": None, "o": True, "gate_up": None, "down": True}
    assert ("talker", on) in seen and ("cp", {**on, "head": None}) in seen
    assert ("talker", {**on, "o": False, "down": False}) in seen
    assert runner.talker_pdl_launch == {name: table[name] for name in ("qkv", "o", "gate_up", "down")}
    assert table == cp_module.PDL_LAUNCH


def test_row_chunks_toggle_the_down_products_slices_in_both_tables(monkeypatch):
    runner, table, cp_module = _pdl_tables(monkeypatch)
    seen = []
    runner._talker_decode = lambda *a: seen.append(
        {k: v.get("row_chunks") for k, v in runner.talker_pdl_launch.items()})
    out = experiments.row_chunks_times(runner, 11, rounds=1)
    assert set(out) == {f"{stage}_{name}_ms" for stage in ("talker_step", "code_predictor_frame", "frame_step")
                        for name in ("chunks1", "chunks3")}
    assert {"qkv": None, "o": None, "gate_up": None, "down": 3} in seen
    assert {"qkv": None, "o": None, "gate_up": None, "down": 1} in seen
    assert table == cp_module.PDL_LAUNCH and runner.talker_pdl_launch["down"] == table["down"]


def test_cp_qkv_table_times_each_batch_with_the_table_and_without_and_restores_it(monkeypatch):
    """--experiments cp_qkv_table: at each batch the runner holds, the frame with passes 1-14's qkv launched and
    gathered from the table, interleaved; the runner's own setting restored."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    runner.max_slots = 8
    cp, table = runner.code_predictor, torch.ones(14, 4, 6)
    cp.qkv_table, cp.first_layer_qkv_table = None, lambda: table
    seen = []
    cp.predict = lambda *a, **k: seen.append(cp.qkv_table)
    out = experiments.cp_qkv_table_times(runner, 11, rounds=2)
    assert set(out) == {1, 8}  # 32 is past the runner's slots
    assert set(out[1]) == {f"{stage}_{name}_ms" for stage in ("code_predictor_frame", "frame_step")
                           for name in ("qkvlaunch", "qkvtable")}
    assert [t is table for t in seen] == [False, True] * 4 and cp.qkv_table is None


def test_cp_attention_o_times_the_two_launches_and_each_candidate_and_restores_them(monkeypatch):
    """--experiments cp_attention_o: at batches 1 and 2, the frame with attention and o as two launches and as one
    with each candidate launch, interleaved; the runner's own settings restored."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    runner.max_slots = 8
    cp = runner.code_predictor
    cp.attention_o, cp.attention_o_launch = False, {1: "own", 2: "prefill"}
    seen = []
    cp.predict = lambda *a, **k: seen.append((cp.attention_o, cp.attention_o_launch))
    out = experiments.cp_attention_o_times(runner, 11, rounds=2, batches=(1, 2, 16))
    assert set(out) == {1, 2}  # 16 is past the runner's slots
    names = ("twolaunch", *experiments.ATTENTION_O_CANDIDATES)
    assert set(out[1]) == {f"{stage}_{name}_ms" for stage in ("code_predictor_frame", "frame_step") for name in names}
    one_round = [(False, {1: "own", 2: "prefill"}),
                 *((True, {1: launch, 2: "prefill"}) for launch in experiments.ATTENTION_O_CANDIDATES.values())]
    assert seen == one_round * 4 and (cp.attention_o, cp.attention_o_launch) == (False, {1: "own", 2: "prefill"})


def test_cp_mma_times_cublas_and_the_tensor_core_passes_and_restores_the_runners_settings(monkeypatch):
    """--experiments cp_mma: at each batch the runner holds, the frame on cuBLAS, on the tensor-core passes (today's
    table, up to 32 rows, without PDL, each candidate table), interleaved; the runner's own settings restored."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    runner.max_slots = 32
    cp = runner.code_predictor
    cp.mma_rows, cp.pdl, cp.mma_launch = 0, True, "own"
    seen = []
    cp.predict = lambda *a, **k: seen.append((cp.mma_rows, cp.pdl, cp.mma_launch))
    out = experiments.cp_mma_times(runner, 11, rounds=2)
    assert set(out) == {8, 32}  # 64 is past the runner's slots
    names = ("cublas", "mma", "mma32", "mmanopdl", *experiments.MMA_CANDIDATES)
    assert set(out[8]) == {f"{stage}_{name}_ms" for stage in ("code_predictor_frame", "frame_step") for name in names}
    one_round = [(0, True, "own"), (64, True, "own"), (32, True, "own"), (64, False, "own"),
                 *((64, True, table) for table in experiments.MMA_CANDIDATES.values())]
    assert seen == one_round * 4 and (cp.mma_rows, cp.pdl, cp.mma_launch) == (0, True, "own")
    assert experiments.MMA_CANDIDATES["mman16"]["qkv"]["block_n"] == 16  # a change to every product's launch
    assert all(cfg["mma"] for table in experiments.MMA_CANDIDATES.values() for cfg in table.values())


def test_draw_ways_times_each_way_count_and_restores_the_draws_launch(monkeypatch):
    """--experiments draw_ways: the frame with every draw's top-k search in 2, 3 and 4 parts, interleaved, through
    kernels/sample.py's DRAW_LAUNCH (a dict: set key by key, restored)."""
    import tts_engine.kernels.sample as sample

    _timed(monkeypatch)
    monkeypatch.setattr(sample, "DRAW_LAUNCH", {"num_warps": 8, "top_k_window": 12, "top_k_ways": 2})
    runner = _Runner(gemv_rows=2)
    runner.max_slots = 8
    seen = []
    runner.code_predictor.predict = lambda *a, **k: seen.append(dict(sample.DRAW_LAUNCH))
    out = experiments.draw_ways_times(runner, 11, rounds=1, batches=(1, 8, 32))
    assert set(out) == {1, 8}
    assert [d["top_k_ways"] for d in seen] == [2, 3, 4] * 2  # the frame: once a variant, a batch
    assert sample.DRAW_LAUNCH == {"num_warps": 8, "top_k_window": 12, "top_k_ways": 2}


def test_split_k_times_each_candidate_and_restore_the_runners_settings(monkeypatch):
    """--experiments cp_split_k / talker_split_k: at each batch the runner holds, the code predictor's frame (the
    talker's step) with each split-K candidate, interleaved; the runner's own settings restored after."""
    from tts_engine.runtime.fused import SplitK

    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    runner.max_slots = 32
    cp = runner.code_predictor
    cp.split_k, runner.talker_split_k = "own", "talker's own"
    seen = []
    cp.predict = lambda *a, **k: seen.append(("cp", cp.split_k))
    runner._talker_decode = lambda *a: seen.append(("talker", runner.talker_split_k))
    out = experiments.cp_split_k_times(runner, 11, rounds=1)
    assert set(out) == {8, 32}  # 64 is past the runner's slots
    candidates = experiments.split_k_candidates(4, 4)
    assert candidates["cublas"] == SplitK() and candidates["down4"] == SplitK(down=4)
    assert candidates["o4down4"] == SplitK(o=4, down=4) and candidates["o8down4"] == SplitK(o=8, down=4)
    assert candidates["o4gu2down4"] == SplitK(o=4, gate_up=2, down=4) and len(candidates) == 7
    assert set(out[8]) == {f"{stage}_{name}_ms" for stage in ("code_predictor_frame", "frame_step")
                           for name in candidates}
    assert [split for who, split in seen if who == "cp"] == list(candidates.values()) * 2  # the frame, batches 8, 32
    seen.clear()
    out = experiments.talker_split_k_times(runner, 11, rounds=1)
    talker = experiments.split_k_candidates(2, 2)
    assert set(talker) == {"cublas", "down2", "o1down2", "o2down2", "o4down2", "o2down4", "o2gu2down2"}
    assert set(out) == {32} and set(out[32]) == {f"talker_step_t{name}_ms" for name in talker}
    assert seen == [("talker", split) for split in talker.values()]
    assert cp.split_k == "own" and runner.talker_split_k == "talker's own"


def test_prefill_split_k_times_each_choice_through_recaptured_graphs_and_restores_them(monkeypatch):
    """--experiments prefill_split_k: each split-K choice's prefill graphs captured in turn and each length timed
    through them, interleaved; the runner's setting restored and its graphs captured with it again."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    runner.prefill_split_k = "own"
    captured, timed = [], []
    runner.capture_prefill_graphs = lambda: captured.append(runner.prefill_split_k)
    runner.prefill_prompt = lambda slot, text, codec: timed.append((runner.prefill_split_k, len(text)))
    out = experiments.prefill_split_k_times(runner, 11, rounds=2, lengths=(12, 40))
    names = ("cublas", "down2", "o2down2", "o4down4")
    assert set(out) == {f"prefill_{n}_{name}_ms" for n in (12, 40) for name in names}
    assert [str(s) for s in captured[:4]] == [str(s) for s in captured[4:8]] and captured[-1] == "own"
    assert len(captured) == 9 and [n for _, n in timed] == [12, 40] * 8
    assert runner.prefill_split_k == "own"


def test_draw_prefetch_times_each_count_and_restores_the_runners_setting(monkeypatch):
    """--experiments draw_prefetch: the frame with the draws prefetching 0-3 of the next pass's weights, interleaved,
    at each batch the runner holds; the runner's own setting restored."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    runner.max_slots = 4
    cp = runner.code_predictor
    cp.draw_prefetch = 0
    seen = []
    cp.predict = lambda *a, **k: seen.append(cp.draw_prefetch)
    out = experiments.draw_prefetch_times(runner, 11, rounds=1)
    assert set(out) == {1, 2}  # 8 is past the runner's slots
    assert set(out[1]) == {f"{stage}_pf{n}_ms" for stage in ("code_predictor_frame", "frame_step") for n in range(4)}
    assert seen == [0, 1, 2, 3] * 2 and cp.draw_prefetch == 0


def test_blas_times_each_choice_and_restores_torchs(monkeypatch):
    """--experiments blas: at each batch, the stages with torch's cuBLAS choices as they are, through cuBLASLt or
    cuBLAS alone, and with bf16 reductions in fp32, interleaved; torch's settings restored after."""
    _timed(monkeypatch)
    runner = _Runner(gemv_rows=2)
    runner.max_slots = 8
    state = {"library": "default", "reduced": True}
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library",
                        lambda value=None: state.update(library=value) if value else state["library"])
    matmul = SimpleNamespace(allow_bf16_reduced_precision_reduction=True)
    monkeypatch.setattr(torch.backends.cuda, "matmul", matmul)
    seen = []
    runner.code_predictor.predict = lambda *a, **k: seen.append(
        (state["library"], matmul.allow_bf16_reduced_precision_reduction))
    out = experiments.blas_times(runner, 11, rounds=1)
    assert set(out) == {8}
    names = ("blasdefault", "cublaslt", "cublas", "fullreduce")
    assert set(out[8]) == {f"{stage}_{name}_ms" for stage in ("talker_step", "code_predictor_frame", "frame_step")
                           for name in names}
    assert seen == [("default", True), ("cublaslt", True), ("cublas", True), ("default", False)]  # the frame
    assert state["library"] == "default" and matmul.allow_bf16_reduced_precision_reduction is True


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
