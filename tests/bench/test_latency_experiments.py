"""bench.latency_experiments' A/Bs (`bench.latency --experiments`): which variants each times at which batch, under
which settings, named how, and that every setting is restored, on the stand-in runner (tests/bench/stand_in.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from bench import latency_experiments as experiments
from tests.bench.stand_in import StandInRunner, fake_timing


def test_the_context_sweep_times_each_launch_at_each_context_against_the_split_step(monkeypatch):
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2, talker_gemv_rows=1)
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

    fake_timing(monkeypatch)
    table = {name: dict(block_n=4, whole_rows=True, pdl=True) for name in ("qkv", "o", "gate_up", "down", "head")}
    monkeypatch.setattr(cp_module, "PDL_LAUNCH", dict(table))
    runner = StandInRunner(gemv_rows=2, talker_gemv_rows=1)
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
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
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
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
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
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
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

    fake_timing(monkeypatch)
    monkeypatch.setattr(sample, "DRAW_LAUNCH", {"num_warps": 8, "top_k_window": 12, "top_k_ways": 2})
    runner = StandInRunner(gemv_rows=2)
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

    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
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
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
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
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
    runner.max_slots = 4
    cp = runner.code_predictor
    cp.draw_prefetch = 0
    seen = []
    cp.predict = lambda *a, **k: seen.append(cp.draw_prefetch)
    out = experiments.draw_prefetch_times(runner, 11, rounds=1)
    assert set(out) == {1, 2}  # 8 is past the runner's slots
    assert set(out[1]) == {f"{stage}_pf{n}_ms" for stage in ("code_predictor_frame", "frame_step") for n in range(4)}
    assert seen == [0, 1, 2, 3] * 2 and cp.draw_prefetch == 0


def test_early_trigger_times_each_set_and_the_prefetch_with_all_and_restores_the_runner(monkeypatch):
    """--experiments early_trigger: the frame with each set of early-triggering launches, and all four with the draws'
    prefetch, interleaved, at the PDL batches the runner holds; the runner's own settings restored."""
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
    runner.max_slots = 1
    cp = runner.code_predictor
    cp.early_trigger, cp.draw_prefetch = ("own",), 0
    seen = []
    cp.predict = lambda *a, **k: seen.append((cp.early_trigger, cp.draw_prefetch))
    out = experiments.early_trigger_times(runner, 11, rounds=2)
    names = [*experiments.EARLY_TRIGGERS, "trigallpf3"]
    assert set(out) == {1} and set(out[1]) == {f"{stage}_{n}_ms" for stage in ("code_predictor_frame", "frame_step")
                                              for n in names}
    want = [(t, 0) for t in experiments.EARLY_TRIGGERS.values()] + [(experiments.EARLY_TRIGGERS["trigall"], 3)]
    assert seen == want * 2 and (cp.early_trigger, cp.draw_prefetch) == (("own",), 0)


def test_talker_trigger_times_each_set_on_the_runners_table_and_restores_it(monkeypatch):
    """--experiments talker_trigger: the talker's steps with its PDL table as it is and with each set of products
    triggering early (those products' pdl PDL_EARLY, the rest as they were), interleaved; the table restored."""
    from tts_engine.kernels.backend import PDL_EARLY
    from tts_engine.runtime.talker_launch import TALKER_EARLY_TRIGGERS

    runner, _, _ = _pdl_tables(monkeypatch)
    runner.max_slots = 1
    own = runner.talker_pdl_launch
    seen = []
    runner._talker_decode = lambda *a: seen.append({n: c["pdl"] for n, c in runner.talker_pdl_launch.items()})
    out = experiments.talker_trigger_times(runner, 11, rounds=1)
    assert set(out) == {f"{stage}_ttrig{k}_ms" for stage in ("talker_step", "talker_step_long", "frame_step")
                        for k in ("0", *TALKER_EARLY_TRIGGERS)}
    plain = dict.fromkeys(("qkv", "o", "gate_up", "down"), True)
    assert seen[0] == seen[1] == plain  # the short and the long step, the table as it is
    assert seen[2] == {**plain, "o": PDL_EARLY, "down": PDL_EARLY}
    assert seen[4] == {**plain, "qkv": PDL_EARLY, "o": PDL_EARLY, "down": PDL_EARLY}
    assert runner.talker_pdl_launch is own and {n: c["pdl"] for n, c in own.items()} == plain


def test_blas_times_each_choice_and_restores_torchs(monkeypatch):
    """--experiments blas: at each batch, the stages with torch's cuBLAS choices as they are, through cuBLASLt or
    cuBLAS alone, and with bf16 reductions in fp32, interleaved; torch's settings restored after."""
    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
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

