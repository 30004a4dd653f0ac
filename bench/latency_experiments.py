"""Batch-1 experiments `bench.latency --experiments` runs instead of its stage table, each an A/B of launch
settings or kernel versions in interleaved rounds, in the benchmark's process and on its runner:

    python -m bench.latency --model /tmp/ckpt-1.7b --make --batches 1 --experiments row_chunks,residual_early

Each is fn(runner, t_len) -> result, timed through the stages of bench/stages.py (`stage_fns`,
`variant_times`).
"""

from __future__ import annotations

import os
import statistics
import sys
from functools import partial
from pathlib import Path

import torch

from bench import latency, latency_stages
from bench.latency_cuda import cp_draw_times, cp_gemm_rows_times, cp_gemv_times, cp_persistent_times
from bench.latency_weights import cp_bytes_times, cp_l2_times
from bench.stages import frame_times, medians, prompt_ids, stage_fns, variant_times

# The fused attention's launches timed against the split one by context (`talker_context_times`).
CONTEXT_LAUNCHES = {"w8b64": dict(num_warps=8), "w8b128": dict(num_warps=8, block_n=128),
                    "w16b64": dict(num_warps=16), "w16b128": dict(num_warps=16, block_n=128),
                    "w8b64s2": dict(num_warps=8, stages=2), "w8b128s2": dict(num_warps=8, block_n=128, stages=2)}


def talker_context_times(runner, t_len: int, contexts=(12, 64, 128, 192, 256, 320, 448), rounds: int = 3) -> dict:
    """(t_len: the experiments' common signature; the contexts set the positions here.)
    The talker's batch-1 step attending to each of `contexts` positions: the configured step ("split")
    against `talker_qk_attention` with each of CONTEXT_LAUNCHES, interleaved rounds, the median of each
    -> {launch: {context: ms}}; where the fused kernel stops paying sets `talker_qk_attention_context`."""
    slots, x = torch.zeros(1, dtype=torch.long, device=runner.device), runner.hidden[:1].clone()
    variants = {"split": dict(talker_qk_attention=False)} | {
        name: dict(talker_qk_attention=True, talker_qk_attention_launch=launch)
        for name, launch in CONTEXT_LAUNCHES.items()}
    runs: dict[str, dict] = {name: {} for name in variants}
    for c in contexts:
        positions = torch.full((1,), c - 1, device=runner.device)
        stage = {"talker_step": partial(runner._talker_decode, slots, x, positions)}
        for _ in range(rounds):
            for name, settings in variants.items():
                for value in variant_times(name, runner, settings, stage).values():
                    runs[name].setdefault(c, []).append(value)
    out = {name: {c: statistics.median(v) if all(isinstance(t, float) for t in v) else v[0]
                  for c, v in by_c.items()} for name, by_c in runs.items()}
    print(f"talker step by context: {out}", flush=True)
    return out


def _pdl_tables_ab(runner, t_len: int, names: tuple[str, str], change, rounds: int) -> dict:
    """The talker's batch-1 step and the code predictor's frame with both PDL launch tables as `change(table,
    False)` and as `change(table, True)` (names[0] / names[1]), interleaved rounds; the tables restored."""
    import tts_engine.runtime.code_predictor as cp_module

    fns = stage_fns(runner, 1, t_len)
    stages = {k: fns[k] for k in ("talker_step", "code_predictor_frame", "frame_step")}
    talker_table, cp_table = runner.talker_pdl_launch, dict(cp_module.PDL_LAUNCH)
    runs: dict[str, list] = {}
    try:
        for _ in range(rounds):
            for name, on in zip(names, (False, True)):
                runner.talker_pdl_launch = change(talker_table, on)
                cp_module.PDL_LAUNCH.update(change(cp_table, on))
                for key, value in variant_times(name, runner, {}, stages).items():
                    runs.setdefault(key, []).append(value)
    finally:
        runner.talker_pdl_launch = talker_table
        cp_module.PDL_LAUNCH.update(cp_table)
    return medians(runs)


def residual_early_times(runner, t_len: int, rounds: int = 3) -> dict:
    """The o and down products' residual read before their PDL wait (gemv `residual_early`) or after it
    ("resoff") in the talker's batch-1 step and the code predictor's frame, interleaved rounds."""
    def early(table: dict, on: bool) -> dict:
        return {k: {**v, "residual_early": on} if k in ("o", "down") else v for k, v in table.items()}

    out = _pdl_tables_ab(runner, t_len, ("resoff", "researly"), early, rounds)
    print(f"residual read early: {out}", flush=True)
    return out


def row_chunks_times(runner, t_len: int, rounds: int = 3) -> dict:
    """The down products' rows as three power-of-two slices (gemv `row_chunks` 3: the talker's 6,144 columns
    as 3 x 2,048, the code predictor's 3,072 as 3 x 1,024) against one slice padded to the next power of
    two ("chunks1" / "chunks3"), in both batch-1 PDL tables, interleaved rounds."""
    def chunks(table: dict, on: bool) -> dict:
        return {k: {**v, "row_chunks": 3 if on else 1} if k == "down" else v for k, v in table.items()}

    out = _pdl_tables_ab(runner, t_len, ("chunks1", "chunks3"), chunks, rounds)
    print(f"down rows in slices: {out}", flush=True)
    return out


def cp_qkv_table_times(runner, t_len: int, rounds: int = 3, batches=(1, 8, 32)) -> dict:
    """The code predictor's frame (and the frame step) with passes 1-14's first-layer qkv product launched
    ("qkvlaunch") or gathered from `CodePredictorRunner.first_layer_qkv_table` by the draw ("qkvtable"), at
    each of `batches` the runner holds, interleaved rounds -> {batch: {key: median ms}}."""
    cp = runner.code_predictor
    table = cp.first_layer_qkv_table()
    return frame_times(runner, t_len, cp, {"qkvlaunch": {"qkv_table": None}, "qkvtable": {"qkv_table": table}},
                        rounds, batches, "the code predictor's first-layer qkv table")


# The attention + o launches `cp_attention_o_times` tries (output features a program, warps).
# The passes of one position a row; the prefill's (2) keeps its launch. Run 23's first candidates: 16-64 features
# at 4 warps, 64 and 128 at 8 (cp_launch.ATTENTION_O_LAUNCH has the figures). Compiled offline for sm90
# (`python -m bench.kernel_resources --attention-o`).
ATTENTION_O_CANDIDATES = {"ao128w8": dict(block_r=128, num_warps=8), "ao64w8": dict(block_r=64, num_warps=8),
                          "ao128w16": dict(block_r=128, num_warps=16), "ao32w8": dict(block_r=32, num_warps=8),
                          "ao64w16": dict(block_r=64, num_warps=16)}


def cp_attention_o_times(runner, t_len: int, rounds: int = 3, batches=(1, 2)) -> dict:
    """The code predictor's frame (and the frame step) with its GEMV passes' attention and o as two launches
    ("twolaunch") or one (`CodePredictorRunner.attention_o`, each of ATTENTION_O_CANDIDATES), at each of `batches`
    (the PDL passes: 1-2 rows), interleaved rounds -> {batch: {key: median ms}}."""
    cp = runner.code_predictor
    prefill = cp.attention_o_launch[2]
    variants = {"twolaunch": {"attention_o": False},
                **{name: {"attention_o": True, "attention_o_launch": {1: launch, 2: prefill}}
                   for name, launch in ATTENTION_O_CANDIDATES.items()}}
    return frame_times(runner, t_len, cp, variants, rounds, batches, "the code predictor's attention + o")


def _mma_table(**change) -> dict:
    """cp_launch.MMA_LAUNCH with `change`: a key in every product's launch that has it, "<product>/<key>" in
    that product's alone."""
    from tts_engine.runtime.cp_launch import MMA_LAUNCH

    return {name: {**cfg, **{k: v for k, v in change.items() if k in cfg},
                   **{k.split("/")[1]: v for k, v in change.items() if k.startswith(f"{name}/")}}
            for name, cfg in MMA_LAUNCH.items()}


# The tensor-core passes' launch tables `cp_mma_times` tries beside today's (cp_launch.MMA_LAUNCH) and cuBLAS.
MMA_CANDIDATES = {"mman16": _mma_table(block_n=16), "mman64": _mma_table(block_n=64, block_k=64, num_warps=8)}


def cp_mma_times(runner, t_len: int, rounds: int = 3, batches=(8, 32, 64)) -> dict:
    """The code predictor's frame (and the frame step) with its passes past the GEMV ones on cuBLAS ("cublas") or on the
    tensor-core kernel (`CodePredictorRunner.mma_rows` 64: "mma" with today's table, PDL where supported; "mma32": up to
    32 rows, batch 32's prefill pass and batch 64 on cuBLAS; "mmanopdl" without PDL; each of MMA_CANDIDATES), at each of
    `batches`, interleaved rounds -> {batch: {key: median ms}}. Run 24 (calls 1-2, bench/results/run24-h200; "mma" then
    had 16 features a program, "mman32" today's 32): mma 3.12 / 3.97 / 6.17 ms a frame at batch 8 / 32 / 64, cuBLAS 2.78
    / 2.95 / 3.09; 32 features a program 2.85 / 3.75 / 4.71; without PDL 3.47 / 4.09 / 5.16; 8 warps, 64 features or
    slices of 64 slower still. Call 2 also timed cuBLAS passes with down, gate/up + down on the tensor-core kernel
    (6598d53, removed since): 2.84 / 2.98 and 2.86 / 2.99 at batch 8 / 32 against cuBLAS' 2.81 / 2.98; call 3 those
    passes' own kernels with PDL (fbe326c, removed since): 2.81 / 2.97 / 3.13 at batch 8 / 32 / 64 against 2.80 / 2.96 /
    3.10."""
    cp = runner.code_predictor
    on = {"mma_rows": 64}
    variants = {"cublas": {"mma_rows": 0}, "mma": on, "mma32": {"mma_rows": 32}, "mmanopdl": {**on, "pdl": False},
                **{name: {**on, "mma_launch": table} for name, table in MMA_CANDIDATES.items()}}
    return frame_times(runner, t_len, cp, variants, rounds, batches, "the code predictor's tensor-core passes")


class _Keys:
    """A dict's keys as attributes: `interleaved_times` sets and restores attributes."""

    def __init__(self, d: dict):
        object.__setattr__(self, "_d", d)

    def __getattr__(self, key):
        return self._d[key]

    def __setattr__(self, key, value):
        self._d[key] = value


def draw_ways_times(runner, t_len: int, rounds: int = 3, batches=(1, 8)) -> dict:
    """The code predictor's frame (and the frame step) with every draw's top-k search cutting its range into 2, 3 or
    4 parts a step (kernels/sample.py DRAW_LAUNCH's `top_k_ways`: "ways2" ...), the rest of DRAW_LAUNCH as it is, at
    each of `batches`, interleaved rounds -> {batch: {key: median ms}}."""
    import tts_engine.kernels.sample as sample

    return frame_times(runner, t_len, _Keys(sample.DRAW_LAUNCH), {f"ways{w}": {"top_k_ways": w} for w in (2, 3, 4)},
                        rounds, batches, "the draws' top-k ways")


def split_k_candidates(down: int, o: int) -> dict:
    """The cuBLAS steps' split-K choices the experiments try (`fused.SplitK`) around a default of `down` and `o`
    partials: cuBLAS' own products ("cublas"), down alone, the default ("o<o>down<down>"), o in half and twice as many,
    down in twice as many, and gate/up in 2 besides (summed by SiLU-mul)."""
    from tts_engine.runtime.fused import SplitK

    return {"cublas": SplitK(), f"down{down}": SplitK(down=down),
            **{f"o{n}down{down}": SplitK(o=n, down=down) for n in (o // 2, o, 2 * o)},
            f"o{o}down{2 * down}": SplitK(o=o, down=2 * down),
            f"o{o}gu2down{down}": SplitK(o=o, gate_up=2, down=down)}


def cp_split_k_times(runner, t_len: int, rounds: int = 3, batches=(8, 32, 64)) -> dict:
    """The code predictor's frame (and the frame step) with its cuBLAS passes' products as cuBLAS makes them or as
    fp32 split-K partials summed by the launch after them (`CodePredictorRunner.split_k`, each of
    `split_k_candidates(4, 4)`), at each of `batches`, interleaved rounds -> {batch: {key: median ms}}. Run 25
    (calls 1 and 2; FastPathOptions.cp_down_splits has the figures): down in 4 and o in 4 partials the best of those
    tried, gate/up's partials slower."""
    variants = {name: {"split_k": split} for name, split in split_k_candidates(4, 4).items()}
    return frame_times(runner, t_len, runner.code_predictor, variants, rounds, batches,
                        "the code predictor's products in split-K partials")


def talker_split_k_times(runner, t_len: int, rounds: int = 3, batches=(32, 64)) -> dict:
    """The talker's cuBLAS steps with their products as cuBLAS makes them or as split-K partials (`ModelRunner
    .talker_split_k`, each of `split_k_candidates(2, 2)`, "t<name>"), at each of `batches`, interleaved rounds ->
    {batch: {key: median ms}}. Run 25 (calls 1 and 2; FastPathOptions.talker_down_splits has the figures): down and o
    in 2 partials the best of those tried."""
    variants = {f"t{name}": {"talker_split_k": split} for name, split in split_k_candidates(2, 2).items()}
    return frame_times(runner, t_len, runner, variants, rounds, batches, "the talker's products in split-K partials",
                        ("talker_step",))


def prefill_split_k_times(runner, t_len: int, rounds: int = 3, lengths=(12, 40, 120)) -> dict:
    """A prompt's prefill through its captured bucket graph (`prefill_prompt`, slot 0) with the talker's cuBLAS
    products as cuBLAS makes them ("cublas") or as split-K partials (`ModelRunner.prefill_split_k`: down 2, o and down
    2, o and down 4), at each of `lengths`, interleaved rounds -> {"prefill_<len>_<name>_ms": median}; the runner's
    setting and graphs restored. (t_len: the experiments' common signature; the lengths set the prompts here.)"""
    from tts_engine.runtime.fused import SplitK

    variants = {"cublas": SplitK(), "down2": SplitK(down=2), "o2down2": SplitK(o=2, down=2),
                "o4down4": SplitK(o=4, down=4)}
    configured, runs = runner.prefill_split_k, {}
    try:
        for _ in range(rounds):
            for name, split in variants.items():
                runner.prefill_split_k = split
                runner.capture_prefill_graphs()  # captured with this setting
                for n in lengths:
                    prefill = partial(runner.prefill_prompt, 0, *prompt_ids(n))
                    runs.setdefault(f"prefill_{n}_{name}_ms", []).append(latency.cuda_time_ms(prefill))
    finally:
        runner.prefill_split_k = configured
        runner.capture_prefill_graphs()
    out = medians(runs)
    print(f"prefill, the talker's products in split-K partials: {out}", flush=True)
    return out


def draw_prefetch_times(runner, t_len: int, rounds: int = 3, batches=(1, 2, 8)) -> dict:
    """The code predictor's frame (and the frame step) with each draw bringing none ("pf0") or the first 1, 2 or 3
    of the next pass's first weights into L2 while it runs (`CodePredictorRunner.draw_prefetch`: "pf<n>"; its
    `prefetch_weights`), at each of `batches`, interleaved rounds -> {batch: {key: median ms}}."""
    variants = {f"pf{n}": {"draw_prefetch": n} for n in range(4)}
    return frame_times(runner, t_len, runner.code_predictor, variants, rounds, batches,
                        "the draws' prefetch of the next pass's weights")


# `early_trigger_times`' variants: which of the code predictor's PDL launches let the next start before their wait.
EARLY_TRIGGERS = {"trig0": (), "trigao": ("attention_o",), "trigdown": ("down",), "trighd": ("head", "draw"),
                  "trigall": ("attention_o", "down", "head", "draw"),
                  "trigallq": ("qkv", "attention_o", "down", "head", "draw")}


def early_trigger_times(runner, t_len: int, rounds: int = 3, batches=(1, 2)) -> dict:
    """The code predictor's frame (and the frame step) with each of EARLY_TRIGGERS (`CodePredictorRunner
    .early_trigger`), and "trigall" with the draws' prefetch of 3 ("trigallpf3"), at each of `batches` (the PDL
    passes), interleaved rounds -> {batch: {key: median ms}}."""
    variants = {name: {"early_trigger": names} for name, names in EARLY_TRIGGERS.items()}
    variants["trigallpf3"] = {"early_trigger": EARLY_TRIGGERS["trigall"], "draw_prefetch": 3}
    return frame_times(runner, t_len, runner.code_predictor, variants, rounds, batches,
                        "the code predictor's early triggers")


def talker_trigger_times(runner, t_len: int, rounds: int = 3) -> dict:
    """The talker's batch-1 step (short context: its fused attention; long: the split one) and the frame step with its
    PDL table as it is ("ttrig0") and with each of talker_launch.TALKER_EARLY_TRIGGERS' products triggering early
    ("ttrig<set>"), interleaved rounds -> {key: median ms}."""
    from tts_engine.kernels.backend import PDL_EARLY
    from tts_engine.runtime.talker_launch import TALKER_EARLY_TRIGGERS

    table = runner.talker_pdl_launch
    variants = {"ttrig0": {"talker_pdl_launch": table}}
    for key, names in TALKER_EARLY_TRIGGERS.items():
        variants[f"ttrig{key}"] = {"talker_pdl_launch": {name: {**cfg, "pdl": PDL_EARLY} if name in names else cfg
                                                         for name, cfg in table.items()}}
    return frame_times(runner, t_len, runner, variants, rounds, (1,), "the talker's early triggers",
                        ("talker_step", "talker_step_long", "frame_step"))[1]


class _Blas:
    """torch's cuBLAS choices as attributes, for `interleaved_times`: `library` (torch.backends.cuda
    .preferred_blas_library: "cublas", "cublaslt") and `reduced` (bf16 products' reductions in reduced precision
    allowed: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction, True by default). A graph keeps the
    kernels cuBLAS picked when it was captured."""

    @property
    def library(self):
        return torch.backends.cuda.preferred_blas_library()

    @library.setter
    def library(self, value):
        torch.backends.cuda.preferred_blas_library(value)

    @property
    def reduced(self):
        return torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction

    @reduced.setter
    def reduced(self, value):
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = value


def blas_times(runner, t_len: int, rounds: int = 3, batches=(8, 32, 64)) -> dict:
    """The talker step, the code predictor's frame and the frame step with cuBLAS' products picked as torch picks them
    ("blasdefault"), through cuBLASLt ("cublaslt") or cuBLAS ("cublas") alone, or with bf16 reductions in fp32
    ("fullreduce"), at each of `batches`, interleaved rounds -> {batch: {key: median ms}}. Run 25 call 1: every stage
    within 0.005 ms of the default at batches 8 and 32, within 0.04 at 64."""
    variants = {"blasdefault": {}, "cublaslt": {"library": "cublaslt"}, "cublas": {"library": "cublas"},
                "fullreduce": {"reduced": False}}
    return frame_times(runner, t_len, _Blas(), variants, rounds, batches, "cuBLAS' choices",
                        ("talker_step", "code_predictor_frame", "frame_step"))


# Where the runtime calls the kernels whose versions `kernels_ab_times` swaps: (runtime module, kernel module,
# function).
AB_CALLS = (("runner", "talker_attention", "decode_qk_attention"), ("runner", "sample", "sample_rows"),
            ("code_predictor", "sample", "sample_rows"), ("code_predictor", "cp_attention", "cp_qk_attention"),
            ("fused", "qk_norm_rope", "qk_norm_rope"))


def kernels_ab_times(runner, t_len: int, rounds: int = 3) -> dict:
    """The batch-1 stages with this tree's attention and draw kernels ("abnew") against another tree's
    ("abold"), in interleaved rounds in one process: CADENCE_AB_KERNELS names a folder holding that tree's
    tts_engine/kernels as a package of another name (e.g. /tmp/ab/oldkernels from `git archive`), whose
    functions of AB_CALLS are swapped in where the runtime calls them."""
    import importlib

    folder = Path(os.environ["CADENCE_AB_KERNELS"])
    sys.path.insert(0, str(folder.parent))
    calls = []
    for runtime, kernel, fn in AB_CALLS:
        where = importlib.import_module(f"tts_engine.runtime.{runtime}")
        old = getattr(importlib.import_module(f"{folder.name}.{kernel}"), fn)
        calls.append((where, fn, getattr(where, fn), old))
    fns = stage_fns(runner, 1, t_len)
    stages = {k: fns[k] for k in ("talker_step", "code_predictor_frame", "frame_step")}
    runs: dict[str, list] = {}
    try:
        for _ in range(rounds):
            for name, pick in (("abold", 3), ("abnew", 2)):
                for call in calls:
                    setattr(call[0], call[1], call[pick])
                for key, value in variant_times(name, runner, {}, stages).items():
                    runs.setdefault(key, []).append(value)
    finally:
        for where, fn, new, _ in calls:
            setattr(where, fn, new)
    out = medians(runs)
    print(f"kernels a/b: {out}", flush=True)
    return out


def draw_gathers_times(runner, t_len: int, rounds: int = 5, batches=(1, 2, 8)) -> dict:
    """The code predictor's frame (and the frame step) with each draw's two row gathers loaded together in one block
    each ("together": kernels/sample.py GATHER_BLOCK 4096, GATHER_TOGETHER) or in 1,024-column blocks in turn ("apart",
    before run 28), at each of `batches`, interleaved rounds -> {batch: {key: median ms}}."""
    from tts_engine.kernels import sample

    variants = {"apart": {"GATHER_BLOCK": 1024, "GATHER_TOGETHER": False},
                "together": {"GATHER_BLOCK": 4096, "GATHER_TOGETHER": True}}
    return frame_times(runner, t_len, sample, variants, rounds, batches, "the draws' row gathers")


# Batch-1 experiments `--experiments` runs instead of the stage table: name -> fn(runner, t_len) -> result.
EXPERIMENTS = {"talker_context": talker_context_times, "residual_early": residual_early_times,
               "row_chunks": row_chunks_times, "kernels_ab": kernels_ab_times, "cp_qkv_table": cp_qkv_table_times,
               "cp_attention_o": cp_attention_o_times, "cp_mma": cp_mma_times,
               "draw_ways": draw_ways_times, "cp_split_k": cp_split_k_times,
               "talker_split_k": talker_split_k_times, "blas": blas_times,
               "prefill_split_k": prefill_split_k_times, "draw_prefetch": draw_prefetch_times,
               "early_trigger": early_trigger_times, "talker_trigger": talker_trigger_times, "cp_l2": cp_l2_times,
               "cp_bytes": cp_bytes_times, "cp_persistent": cp_persistent_times,
               "draw_gathers": draw_gathers_times, "cp_draw": cp_draw_times, "cp_gemv": cp_gemv_times,
               "cp_gemm_rows": cp_gemm_rows_times,
               "qk_attention": lambda runner, t_len: latency_stages.talker_qk_attention_times(
                   runner, stage_fns(runner, 1, t_len))}
