"""The talker's launch tables: which kernel configuration each of its products (and its fused attention) runs
with on the fast path, by the path a step takes (runner.ModelRunner reads them when it is built; a benchmark may
set its own on the runner). Each table's comment says which measurement chose it (docs/benchmarks.md).

    TALKER_GEMV_LAUNCH          steps of up to `FastPathOptions.talker_gemv_rows` rows, without PDL
    TALKER_PDL_LAUNCH           the same steps with programmatic dependent launch (`talker_pdl`, the default)
    TALKER_PDL_MIXED            a table that lost to it (bench.latency times it)
    TALKER_QK_ATTENTION_LAUNCH  kernels/talker_attention.py in those steps
    PREFILL_MMA_LAUNCH          prefills on the tensor-core kernel (`prefill_mma_rows`, off)
"""

from __future__ import annotations

from ..kernels.gemv import LATE_SUM

# The talker's products on kernels/gemv.py (FastPathOptions.talker_gemv_rows), per product (1.7B shapes:
# qkv [4096, 2048], o [2048, 2048], gate/up [12288, 2048], down [2048, 6144]): the fastest of run 10's
# `bench.kernels --gemv-sweep --shapes talker` on the H200 at 1 row, µs with cuBLAS + epilogue in
# brackets: qkv 6.91 (6.97), o + residual 3.87 (6.45), gate/up + SwiGLU 15.77 (17.30), down + residual
# 9.37 (13.23); their floors at 4.19 TB/s 4.0 / 2.0 / 12.0 / 6.0.
TALKER_GEMV_LAUNCH = {"qkv": dict(block_n=8, block_k=512, **LATE_SUM), "o": dict(block_n=8, block_k=512, **LATE_SUM),
                      "gate_up": dict(block_n=16, block_k=256, **LATE_SUM),
                      "down": dict(block_n=4, block_k=512, **LATE_SUM)}
# With `FastPathOptions.talker_pdl` those steps launch every kernel with programmatic dependent launch
# (the products, q/k norm + RoPE, attention, the final norm), the products with whole rows of w per
# program, loaded before the wait for the previous kernel: the next product's weights stream in while
# the current kernel finishes (the code predictor's PDL passes, cp_launch.PDL_LAUNCH: frame 2.42
# -> 1.82 ms in run 10). The fastest whole-row configurations of run 13's sweep with PDL (`bench.kernels
# --gemv-sweep --shapes talker`, one product chained with itself, µs): qkv 6.60, o + residual 3.50,
# gate/up + SwiGLU 15.53, down + residual 10.65. Run 13's talker step at batch 1 (607ce2e): 1.386 ms
# without PDL, 1.252 with run 13's table, 1.441 with TALKER_PDL_MIXED (the sweep's sliced kernels with PDL,
# faster alone for qkv and down, slower in the step), 1.469 with PDL over the sliced table. Run 20's
# `bench.step_sweep` (each candidate timed as the whole step, the others at their best;
# bench/results/run20-h200/call1) chose run 21's table: 1.215 ms a step against 1.248 with run 13's (qkv n4 w4,
# o n4 w8, gate/up n2 w4), three interleaved pairs.
# o and down read their residual before the wait (`residual_early`; cp_launch.PDL_LAUNCH says why it is
# right): run 21, talker step 1.211 -> 1.191 ms.
# gate/up and down stream their row blocks (gemv `row_blocks`: a program's next block of weights in flight
# while it sums the last, so no later wave waits for a program to exit), and qkv two blocks of 4 rows. Run 22
# (bench/results/run22-h200): `bench.step_sweep --stages talker_stream` (call 1) streamed gate/up (1 row x 8
# blocks, 4 warps) and down (2 rows x 4 blocks, 8 warps): talker step 1.080 -> 1.020 ms, three interleaved
# pairs; `--stages talker_fine --rounds 2` (call 3) around those: this table, 1.020 -> 0.941 ms (gate/up 6
# blocks instead of 8 is most of it: 0.942 against 1.003 in one round; 78 registers against 95, so 6 of its
# programs an SM instead of 5: `python -m bench.kernel_resources`).
TALKER_PDL_LAUNCH = {"qkv": dict(block_n=4, num_warps=4, row_blocks=2),
                     "o": dict(block_n=4, num_warps=4, residual_early=True),
                     "gate_up": dict(block_n=1, num_warps=4, row_blocks=6),
                     "down": dict(block_n=2, num_warps=8, row_blocks=4, residual_early=True)}
TALKER_PDL_LAUNCH = {name: dict(cfg, whole_rows=True, pdl=True) for name, cfg in TALKER_PDL_LAUNCH.items()}
# Products of the talker's PDL steps that may let the next launch start before their own wait (`backend.PDL_EARLY`),
# as sets a benchmark tries (bench.latency --experiments talker_trigger; untimed, so the table above has none): o ->
# gate/up (weights before its wait) and down -> the next qkv or the final norm (weights) read early nothing the launch
# before them writes; o's residual (the layer's input, down's) is complete once the attention has passed its wait, and
# down's (o's output) once gate/up has, so attention and gate/up stay late. qkv may too (-> the attention: cache
# positions of earlier steps, the step's rows and lengths; or q/k norm + RoPE: the RoPE rows), but then not the
# attention, or o's residual would not be waited for.
TALKER_EARLY_TRIGGERS = {"od": ("o", "down"), "qod": ("qkv", "o", "down")}
TALKER_PDL_MIXED = {**TALKER_PDL_LAUNCH, "qkv": dict(block_n=8, block_k=512, pdl=True, **LATE_SUM),
                    "down": dict(block_n=4, block_k=512, pdl=True, **LATE_SUM)}

# kernels/talker_attention.py's launch in those steps. Run 21 (bench.latency --experiments talker_context,
# bench/results/run21-h200/call2; talker step at batch 1, ms, split attention / this launch / 8 warps with
# 64-key blocks, three interleaved rounds): context 12 1.220 / 1.099 / 1.097, 128 1.225 / 1.105 / 1.164,
# 256 1.223 / 1.181 / 1.272, 320 1.225 / 1.249 / 1.327, 448 1.227 / 1.318 / 1.438. 16 warps, and two
# blocks in flight (`stages`), were slower; 4 warps 1.191 at 12 (call 1).
TALKER_QK_ATTENTION_LAUNCH = dict(block_n=128, num_warps=8)

# With `FastPathOptions.prefill_mma_rows`: the talker's products in a prefill of up to 64 rows on the
# tensor-core kernel (rows padded to 16 / 32 / 64): 128-192 programs a product for the H200's 132 SMs,
# and at 64 rows within its shared memory (gate/up: 96 KB). Run 16 swept the talker's shapes (close to
# this table: bench/results/run16-h200/call1/gemv-sweep.json) and profiled the prefill: the products
# with the RMSNorm in their prologue (qkv, gate/up) lose 9-12 µs each to it, so the prefill is slower
# than cuBLAS's (12 rows 2.32 against 1.60 ms); without the prologue it would only tie. Off.
PREFILL_MMA_LAUNCH = {"qkv": dict(mma=True, block_n=32, block_k=128, stages=3, num_warps=4),
                      "o": dict(mma=True, block_n=16, block_k=256, stages=3, num_warps=4),
                      "gate_up": dict(mma=True, block_n=32, block_k=128, stages=3, num_warps=4),
                      "down": dict(mma=True, block_n=16, block_k=256, stages=3, num_warps=4)}
