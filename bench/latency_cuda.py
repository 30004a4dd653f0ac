"""The A/Bs of the CUDA C++ kernels (kernels/cuda/; `bench.latency --experiments cp_persistent | cp_draw | cp_gemv |
cp_gemm_rows`): each times the code predictor's frame (and the frame step) with the kernel in each of its variants
against what runs without it, interleaved rounds, through bench/stages.py (`frame_times`) like
bench/latency_experiments.py's, whose EXPERIMENTS names them."""

from __future__ import annotations

from bench.stages import frame_times
from tts_engine.runtime.cp_launch import ROWS_EARLY_LAUNCHES


def cp_persistent_times(runner, t_len: int, rounds: int = 5, batches=(1,)) -> dict:
    """The code predictor's batch-1 frame (and the frame step) with passes 1-14 as the persistent CUDA kernel
    (kernels/cp_pass.py) in each of PERSISTENT_VARIANTS against the Triton passes ("triton"), interleaved rounds
    -> {batch: {key: median ms}}; whether a launch's wait timed out ("persistent_timed_out")."""
    cp = runner.code_predictor
    kernels = {name: cp.persistent_kernel(macros=macros) for name, macros in PERSISTENT_VARIANTS.items()}
    variants = {"triton": {"persistent": None}} | {name: {"persistent": k} for name, k in kernels.items()}
    out = frame_times(runner, t_len, cp, variants, rounds, batches, "the persistent code-predictor passes")
    out["persistent_timed_out"] = {name: k.timed_out() for name, k in kernels.items()}
    # the traced variants' last frames, CTA 0's view of each step's phases (µs)
    out["persistent_trace"] = {name: k.trace_phases() for name, k in kernels.items() if "CP_TRACE=1" in k.macros}
    print(f"persistent trace: {out['persistent_trace']}", flush=True)
    return out


def cp_draw_times(runner, t_len: int, rounds: int = 5, batches=(1, 8, 32)) -> dict:
    """The code predictor's frame (and the frame step) with its draws on the CUDA kernel (kernels/cp_draw.py) in each
    of CP_DRAW_VARIANTS against the Triton draw ("triton"), at each of `batches`, interleaved rounds -> {batch: {key:
    median ms}}."""
    cp = runner.code_predictor
    variants = {"triton": {"draw_kernel": None}} | {
        name: {"draw_kernel": cp.cuda_draw_kernel(macros=macros)} for name, macros in CP_DRAW_VARIANTS.items()}
    return frame_times(runner, t_len, cp, variants, rounds, batches, "the CUDA code-predictor draw")


def cp_gemv_times(runner, t_len: int, rounds: int = 5, batches=(1,)) -> dict:
    """The code predictor's batch-1 frame (and the frame step) with its one-row products on the CUDA tensor-core kernel
    (kernels/cp_gemv.py) in each of CP_GEMV_VARIANTS against the Triton GEMVs ("triton"), interleaved rounds ->
    {batch: {key: median ms}}."""
    from tts_engine.kernels.cp_gemv import CpGemv

    cp = runner.code_predictor
    variants = {"triton": {"gemv_kernel": None}} | {name: {"gemv_kernel": CpGemv(cp.device, kw=kw, macros=macros)}
                                                    for name, (kw, macros) in CP_GEMV_VARIANTS.items()}
    return frame_times(runner, t_len, cp, variants, rounds, batches, "the CUDA one-row products")


def cp_gemm_rows_times(runner, t_len: int, rounds: int = 3, batches=(8, 16, 32)) -> dict:
    """The code predictor's frame (and the frame step) with the products of its passes past the GEMV ones on the CUDA
    kernel's rows (kernels/cp_gemv.py `cp_gemm_rows`) in each of CP_GEMM_ROWS_VARIANTS, against cuBLAS without PDL,
    interleaved rounds -> {batch: {key: median ms}}."""
    from tts_engine.kernels.cp_gemv import CpGemv

    cp = runner.code_predictor
    variants = {"cublas": {"gemv_kernel_rows": 0}} | {
        name: {"gemv_kernel_rows": 32, "rows_pdl": True, **settings, "gemv_kernel": CpGemv(cp.device, **kernel)}
        for name, (settings, kernel) in CP_GEMM_ROWS_VARIANTS.items()}
    return frame_times(runner, t_len, cp, variants, rounds, batches, "the CUDA rows products")


# The rows passes' variants: (the runner's settings, CpGemv's keywords). Run 32: call 1 (up to 32 rows on the rows;
# the x copies then all at once) timed columns a CTA (rows_cta_k: o and down as split-K partials; 1 << 20 whole),
# call 2 the blocks of 16 rows of w a CTA (kernels/cp_gemv.py ROWS_BLOCKS), call 3 passes of 64 rows on them (slower
# than cuBLAS: the code predictor's frame at batch 32 2.344 ms with its prefill on them against 2.300, at batch 64
# 3.124-3.397 against 2.771), call 3 x's copies in 2 and 4 groups of columns (CG_STAGES=2 / 4: 2.318 / 2.331 against
# 2.300) and the attention's warps (4 or 8: slower). Run 33: call 3 fewer blocks of w a CTA where they would leave
# fewer than 64 or 96 CTAs (kernels/cp_gemv.py ROWS_MIN_CTAS: o, down and the heads at 32 rows; a tie and slower);
# call 4 these: the norms as launches of their own or in the products (`CodePredictorRunner.rows_norms`), each with
# every launch that may letting the next start before its wait (`rows_early`), and with only the products doing so;
# and (call 2, without the early triggers) a bound of the norms in the products without their arithmetic (macros
# CG_BOUND=1: wrong codes).
CP_GEMM_ROWS_VARIANTS = {"rows": ({"rows_norms": False, "rows_early": ()}, {}),
                         "norms": ({"rows_norms": True, "rows_early": ()}, {}),
                         "rows_early": ({"rows_norms": False, "rows_early": ROWS_EARLY_LAUNCHES}, {}),
                         "rows_early_products": ({"rows_norms": False, "rows_early": ("o", "gate_up", "down")}, {}),
                         "norms_early": ({"rows_norms": True, "rows_early": ROWS_EARLY_LAUNCHES}, {}),
                         "norms_bound": ({"rows_norms": True, "rows_early": ROWS_EARLY_LAUNCHES},
                                         {"macros": ("CG_BOUND=1",)})}


# The CUDA one-row products' variants: (columns a warp, kernels/cuda/cp_gemv.cu macros).
CP_GEMV_VARIANTS = {"cuda": (256, ()), "cuda_kw512": (512, ())}


# The CUDA draw's variants (kernels/cuda/cp_draw.cu macros): the top-k search's 8-way passes before its walk, and bounds
# with wrong ids (CD_BOUND): every id kept (no top-k search), no draw (id 0 after the logits' load, then the gathers),
# nor the gathers. Run 30, frame ms at batch 1 / 8 / 32 (call 1): 4 passes 1.376 / 2.490 / 2.664, 3 passes 1.365 / 2.487
# / 2.658, 5 passes 1.380 / 2.500 / 2.672, the Triton draw 1.375 / 2.498 / 2.676; (call 2) 4 passes 1.379 / 2.482 /
# 2.677, 3 passes 1.373 / 2.481 / 2.669, every id kept 1.355 / 2.440 / 2.625, no draw 1.340 / 2.416 / 2.603, nor the
# gathers 1.321 / 2.416 / 2.602, the Triton draw 1.386 / 2.494 / 2.684.
CP_DRAW_VARIANTS = {"cuda": (), "cuda_p4": ("CD_PASSES=4",), "bound_keep_all": ("CD_BOUND=1",),
                    "bound_no_draw": ("CD_BOUND=2",), "bound_no_gather": ("CD_BOUND=3",)}


# The persistent passes' variants (kernels/cuda/cp_pass.cu macros). Run 28 timed CP_POLL_PAUSE_NS 0-256 (a tie) and
# took its kernel apart with bounds (CP_NO_WEIGHTS, CP_NO_WAIT, CP_NO_ATTN, CP_EMPTY_STEPS: garbage codes). Run 29,
# call 1: run 28's order of loads (CP_EARLY_RES=0 CP_ATT_ONE_POLL=0) 1.942 ms, today's default 1.869, the weights in
# registers (CP_REG_WEIGHTS=1) 1.873, the L2 asked two steps ahead (CP_L2_AHEAD=2) 1.983, against the Triton passes'
# 1.370. Call 2 traced the steps (CP_TRACE: CTA 0 stamps each step's phases): the attention took 4.6-5.7 µs after its
# inputs arrived (its 16 scores in local memory, fixed since), the products in registers waited 1-2 µs for weights
# asked one step ahead. Call 3: the weights staged (CP_REG_WEIGHTS=2: bulk copies three steps ahead, moved into
# registers as the step before ends), each way traced, and a bound without the attention.
PERSISTENT_VARIANTS = {"smem": (), "regs": ("CP_REG_WEIGHTS=1",), "staged": ("CP_REG_WEIGHTS=2",),
                       "smem_trace": ("CP_TRACE=1",), "regs_trace": ("CP_REG_WEIGHTS=1", "CP_TRACE=1"),
                       "staged_trace": ("CP_REG_WEIGHTS=2", "CP_TRACE=1"),
                       "staged_noattn_trace": ("CP_REG_WEIGHTS=2", "CP_NO_ATTN=1", "CP_TRACE=1")}
