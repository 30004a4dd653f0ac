"""bench.latency's stage table (issue 3's per-stage GPU times at each batch) and the settings timed beside it: the
other attention version, the talker's GEMV and PDL variants, its one-launch attention, the code predictor on cuBLAS or
the tensor-core kernel and its attention's launches, each against the runner's own (bench/stages.py `variant_times`);
and `pdl_launch_from`, a step sweep's best tables installed before the table is timed."""

from __future__ import annotations

import statistics

import torch

from bench.cuda_timing import cuda_time_ms, graph_of
from bench.stages import interleaved_times, prefill_every_slot, stage_fns, variant_times


def stage_times(runner, prompt_rows, batches) -> dict:
    from tts_engine.kernels.backend import pdl_supported

    prefill_every_slot(runner, prompt_rows)
    out = {}
    t_len = prompt_rows.shape[0]
    with torch.inference_mode():
        for b in batches:
            out[b] = _stage_times_at(runner, b, t_len)
            print(f"batch {b}: {out[b]}", flush=True)
        # Last, so that a failure cannot cost the rest: batch 1 with (without) programmatic dependent
        # launch (sm90+).
        cp = runner.code_predictor
        if pdl_supported(runner.device) and cp.gemv_rows and 1 in out:
            fns = stage_fns(runner, 1, t_len)
            out[1] |= variant_times("nopdl" if cp.pdl else "pdl", cp, dict(pdl=not cp.pdl),
                                     {k: fns[k] for k in ("code_predictor_frame", "frame_step")})
            print(f"batch 1, PDL {'off' if cp.pdl else 'on'}: {out[1]}", flush=True)
        if cp.use_triton:
            out = cp_attention_times(runner, out, t_len)
        if pdl_supported(runner.device) and runner.talker_gemv_rows and 1 in out:
            out[1] |= talker_pdl_times(runner, stage_fns(runner, 1, t_len))
            print(f"batch 1, the talker's PDL variants: {out[1]}", flush=True)
            out[1] |= talker_qk_attention_times(runner, stage_fns(runner, 1, t_len))
            print(f"batch 1, the talker's fused attention: {out[1]}", flush=True)
    return out


def cp_attention_times(runner, out: dict, t_len: int) -> dict:
    """The code predictor's q/k norm + RoPE in its attention's launch or in one of its own, at each batch
    of `out`: the other setting of `fused_attention` ("cpunfused" / "cpfused") where its passes run
    without PDL, of `fused_attention_pdl` ("cpfusedpdl" / "cpunfusedpdl") where with PDL; and the fused
    kernel with 1, 2, 4 and 8 warps a program ("cpfused_w<n>", fused where it is not)."""
    cp = runner.code_predictor
    stages = ("code_predictor_frame", "frame_step")
    for b in out:
        fns = stage_fns(runner, b, t_len)
        fns = {k: fns[k] for k in stages}
        if cp.uses_pdl(b):  # the frame's 1-position passes; its prefill pass holds 2 b rows
            key, name = "fused_attention_pdl", "cpunfusedpdl" if cp.fused_attention_pdl else "cpfusedpdl"
        else:
            key, name = "fused_attention", "cpunfused" if cp.fused_attention else "cpfused"
        out[b] |= variant_times(name, cp, {key: not getattr(cp, key)}, fns)
        for warps in (1, 2, 4, 8):
            out[b] |= variant_times(f"cpfused_w{warps}", cp, {key: True, "fused_attention_warps": warps}, fns)
        print(f"batch {b}, the code predictor's attention: {out[b]}", flush=True)
    return out


def pdl_launch_from(runner, sweep: dict) -> dict:
    """A `bench.step_sweep` result's best tables installed for the batch-1 PDL steps, each product's
    entry merged onto the default's -> the tables now in use, by stage. A step swept in several stages
    (talker, talker_down, talker_stream, talker_fine; cp, cp_down, cp_stream) takes the stage whose best was
    fastest, by the medians of its interleaved pairs where it has them (a sweep's own best_ms rides its drift);
    a stage whose best lost its pairs to the default is left out (run 22's cp_stream: 1.564 against 1.506 ms)."""
    import tts_engine.runtime.code_predictor as cp_module

    def best_ms(stage: dict) -> float:
        pairs = stage.get("interleaved_ms")
        return statistics.median(pairs["best"]) if pairs else stage["best_ms"]

    def won(stage: dict) -> bool:
        pairs = stage.get("interleaved_ms")
        return not pairs or statistics.median(pairs["best"]) < statistics.median(pairs["default"])

    def best_of(step: str) -> dict | None:
        swept = [sweep[k] for k in (step, f"{step}_down", f"{step}_stream", f"{step}_fine") if k in sweep]
        swept = [stage for stage in swept if won(stage)]
        return min(swept, key=best_ms)["best"] if swept else None

    if (best := best_of("talker")) is not None:
        runner.talker_pdl_launch = {k: {**v, **best.get(k, {})} for k, v in runner.talker_pdl_launch.items()}
    if (best := best_of("cp")) is not None:
        cp_module.PDL_LAUNCH.update({k: {**v, **best.get(k, {})} for k, v in cp_module.PDL_LAUNCH.items()})
    return {"talker": runner.talker_pdl_launch, "cp": dict(cp_module.PDL_LAUNCH)}


def talker_pdl_times(runner, fns: dict) -> dict:
    """The talker's GEMV step (batch 1) with and without programmatic dependent launch, and which part
    of a difference is PDL and which the whole-row products it launches (`talker_launch.TALKER_PDL_LAUNCH`):
    the other setting of `talker_pdl` ("tpdl" / "notpdl"), PDL over the sliced products ("tpdl_sliced"),
    over `talker_launch.TALKER_PDL_MIXED` ("tpdl_mixed"), the whole-row products without PDL ("trows"); PDL
    with the attention's early loads of earlier positions ("tpdl_early", `talker_attention_early`); the
    attention as one key chunk a kv head, no merge ("tsplit1", `talker_attention_splits`)."""
    from tts_engine.runtime.talker_launch import TALKER_PDL_MIXED

    on = {k: {**cfg, "pdl": True} for k, cfg in runner.talker_launch.items()}
    rows = {k: {**cfg, "pdl": False} for k, cfg in runner.talker_pdl_launch.items()}
    stages = {k: fns[k] for k in ("talker_step", "talker_step_long", "frame_step")}
    out = variant_times("notpdl" if runner.talker_pdl else "tpdl", runner, dict(talker_pdl=not runner.talker_pdl),
                         stages)
    out |= variant_times("tpdl_sliced", runner, dict(talker_pdl=True, talker_pdl_launch=on), stages)
    out |= variant_times("tpdl_mixed", runner, dict(talker_pdl=True, talker_pdl_launch=TALKER_PDL_MIXED), stages)
    out |= variant_times("trows", runner, dict(talker_pdl=False, talker_launch=rows), stages)
    out |= variant_times("tpdl_early", runner, dict(talker_pdl=True, talker_attention_early=True), stages)
    out |= variant_times("tsplit1", runner, dict(talker_attention_splits=1), stages)  # no merge launch
    return out


# kernels/talker_attention.py's launches (`runner.talker_qk_attention_launch`), by variant name.
QK_ATTENTION_VARIANTS = {"tqkattn": {}, "tqkattn_nodot": dict(dot=False), "tqkattn_w4": dict(num_warps=4),
                         "tqkattn_b64": dict(block_n=64), "tqkattn_late": dict(early=False)}


def talker_qk_attention_times(runner, fns: dict, rounds: int = 3) -> dict:
    """The talker's batch-1 step with its q/k norm, RoPE, K/V store and attention in one launch a layer
    (kernels/talker_attention.py at every context, its launch by variant) against never ("tqkbase"), in
    `rounds` interleaved rounds (each variant's graph captured anew a round): `<stage>_<name>_ms` the
    median of its rounds, short and long context."""
    stages = {k: fns[k] for k in ("talker_step", "talker_step_long")}
    every, table = runner.max_context, runner.talker_qk_attention_launch  # the fused attention at both contexts
    variants = {"tqkbase": dict(qk_attention_context=0)} | {
        name: dict(qk_attention_context=every, talker_qk_attention_launch={**table, **launch})
        for name, launch in QK_ATTENTION_VARIANTS.items()}
    return interleaved_times(runner, variants, stages, rounds)


def _stage_times_at(runner, b: int, t_len: int) -> dict:
    """Stage times at batch b, and the other paths' beside them: the talker with the other attention
    version, with (without) its GEMVs, the code predictor on cuBLAS (where its GEMVs serve b) or on
    the tensor-core kernel."""
    from tts_engine.runtime.options import MAX_CP_MMA_ROWS

    fns = stage_fns(runner, b, t_len)
    graphs = {stage: graph_of(fn) for stage, fn in fns.items()}
    out = {f"{stage}_ms": cuda_time_ms(g) for stage, g in graphs.items()}
    cp_runner = runner.code_predictor

    def pick(*stages):
        return {k: fns[k] for k in stages}

    if runner.use_triton:
        other = 5 - runner.attention_version  # 2 <-> 3
        out |= variant_times(f"attn{other}", runner, dict(attention_version=other),
                              pick("talker_step", "talker_step_long", "frame_step"))
    if runner.use_triton and runner.talker_gemv_rows < b <= 2:
        out |= variant_times("tgemv", runner, dict(talker_gemv_rows=2),
                              pick("talker_step", "talker_step_long", "frame_step"))
    elif b <= runner.talker_gemv_rows:
        out |= variant_times("talker_cublas", runner, dict(talker_gemv_rows=0), pick("talker_step", "frame_step"))
    if b <= cp_runner.gemv_rows:
        out |= variant_times("cublas", cp_runner, dict(gemv_rows=0), pick("code_predictor_frame", "frame_step"))
    elif cp_runner.use_triton and not cp_runner.mma_rows and b <= MAX_CP_MMA_ROWS:  # (a prefill past it: cuBLAS)
        out |= variant_times("mma", cp_runner, dict(mma_rows=MAX_CP_MMA_ROWS),
                              pick("code_predictor_frame", "frame_step"))
    return out
