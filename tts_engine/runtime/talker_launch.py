"""The talker's launch tables: which kernel configuration each of its products (and its fused attention) runs
with on the fast path, by the path a step takes (runner.ModelRunner reads them when it is built; a benchmark may
set its own on the runner). Each is the fastest of a sweep timed as the whole step on the H200.

    TALKER_GEMV_LAUNCH          steps of up to `FastPathOptions.talker_gemv_rows` rows, without PDL
    TALKER_PDL_LAUNCH           the same steps with programmatic dependent launch (`talker_pdl`, the default)
    TALKER_QK_ATTENTION_LAUNCH  kernels/talker_attention.py in those steps
"""

from __future__ import annotations

from ..kernels.gemv import LATE_SUM

# The talker's products on kernels/gemv.py (FastPathOptions.talker_gemv_rows), per product (1.7B shapes:
# qkv [4096, 2048], o [2048, 2048], gate/up [12288, 2048], down [2048, 6144]): the fastest at 1 row, µs with
# cuBLAS + epilogue in brackets: qkv 6.91 (6.97), o + residual 3.87 (6.45), gate/up + SwiGLU 15.77 (17.30),
# down + residual 9.37 (13.23); their floors at 4.19 TB/s 4.0 / 2.0 / 12.0 / 6.0.
TALKER_GEMV_LAUNCH = {"qkv": dict(block_n=8, block_k=512, **LATE_SUM), "o": dict(block_n=8, block_k=512, **LATE_SUM),
                      "gate_up": dict(block_n=16, block_k=256, **LATE_SUM),
                      "down": dict(block_n=4, block_k=512, **LATE_SUM)}
# With `FastPathOptions.talker_pdl` those steps launch every kernel with programmatic dependent launch
# (the products, q/k norm + RoPE, attention, the final norm), the products with whole rows of w per
# program, loaded before the wait for the previous kernel: the next product's weights stream in while
# the current kernel finishes. The sweep timed each candidate as the whole step, the others at their
# best; the sliced (not whole-row) kernels, faster alone for qkv and down, are slower in the step.
# o and down read their residual before the wait (`residual_early`; cp_launch.PDL_LAUNCH says why it is
# right). gate/up and down stream their row blocks (gemv `row_blocks`: a program's next block of weights in
# flight while it sums the last, so no later wave waits for a program to exit), and qkv two blocks of 4 rows;
# gate/up in 6 blocks, not 8, keeps its registers at 78 (6 programs an SM instead of 5).
TALKER_PDL_LAUNCH = {"qkv": dict(block_n=4, num_warps=4, row_blocks=2),
                     "o": dict(block_n=4, num_warps=4, residual_early=True),
                     "gate_up": dict(block_n=1, num_warps=4, row_blocks=6),
                     "down": dict(block_n=2, num_warps=8, row_blocks=4, residual_early=True)}
TALKER_PDL_LAUNCH = {name: dict(cfg, whole_rows=True, pdl=True) for name, cfg in TALKER_PDL_LAUNCH.items()}

# kernels/talker_attention.py's launch in those steps (talker step at batch 1, ms, split attention / this
# launch: context 12 1.220 / 1.099, 256 1.223 / 1.181, 320 1.225 / 1.249). 4 or 16 warps, 64-key blocks and
# two blocks in flight (`stages`) are slower.
TALKER_QK_ATTENTION_LAUNCH = dict(block_n=128, num_warps=8)
