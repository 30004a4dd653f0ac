"""Which kernels the fast path runs where several compute the same step (each is tested against the
others and against plain torch). The defaults are what the H200 measurements in docs/benchmarks.md
chose; the rest stays selectable so that it can be timed against them."""

from __future__ import annotations

import logging
from dataclasses import dataclass

# Past a few token rows cuBLAS is faster than the CUDA-core GEMVs (it takes ~the same time for
# 1 or 16 rows; a GEMV's cost grows with its rows): run 9's sweep at 2-16 rows.
MAX_GEMV_ROWS = 4
CP_GEMV_ROWS = 2
# Rows of one tensor-core tile (kernels/gemv.py MAX_MMA_ROWS): code-predictor passes (cp_mma_rows) and prompts
# (prefill_mma_rows) up to this long can run on it.
MAX_CP_MMA_ROWS = MAX_PREFILL_MMA_ROWS = 64
MAX_SPLIT_K = 16  # split-K partials of a product (each an fp32 [rows, N] that the launch after it reads)


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FastPathOptions:
    # Talker decode steps of at most this many rows run their products through kernels/gemv.py
    # (the norms and residual adds fused in; `fused.decoder_step_gemv`), larger ones through cuBLAS.
    # Run 10: talker step at batch 1 1.43 ms against 1.60 (its products at 1 row swept; 2 rows not).
    talker_gemv_rows: int = 1
    # The same for the code predictor's passes (a pass holds b rows, its prefill 2 b).
    cp_gemv_rows: int = CP_GEMV_ROWS
    # Code-predictor passes past cp_gemv_rows and up to this many rows (a pass holds b rows, its prefill 2 b) on
    # the same fusions with tensor-core products (kernels/gemv_mma.py, cp_launch.MMA_LAUNCH; with PDL where
    # cp_pdl is) instead of cuBLAS; 0: none.
    cp_mma_rows: int = 0
    # The code predictor's GEMV passes of 1-2 rows with programmatic dependent launch; None: where the
    # device supports it (compiled Triton on sm90+). Run 10: frame at batch 1 1.82 ms against 2.42.
    cp_pdl: bool | None = None
    # The talker's GEMV steps (talker_gemv_rows) with programmatic dependent launch, every kernel of the
    # step, the products on whole rows of w (talker_launch.TALKER_PDL_LAUNCH); None: where supported (sm90+).
    # Run 13: talker step at batch 1 1.39 -> 1.25 ms; run 14: socket p50 10.55 against 10.63 ms, and the
    # engine's GPU tests with it. The default since run 14.
    talker_pdl: bool | None = None
    # The code predictor's q/k norm + RoPE + K/V store fused into its attention kernel
    # (kernels/cp_attention.py `cp_qk_attention`): one launch a layer fewer, 75 a frame. Run 14 (warps by
    # `cp_launch.attention_warps`): frame 1.765 / 2.952 / 3.102 / 3.208 ms at batch 1 / 8 / 32 / 64
    # against 1.821 / 3.020 / 3.179 / 3.386 unfused.
    cp_fused_attention: bool = True
    # Passes 1-14 of the code predictor take their first layer's qkv product from a table made at load
    # (`CodePredictorRunner.first_layer_qkv_table`, 235 MB at bf16: the pass's input is a function of the
    # code the draw before it picked), gathered by that draw: a product and a launch fewer a pass. Run 23
    # (interleaved pairs): frame 1.503 / 2.866 / 3.046 -> 1.479 / 2.797 / 2.954 ms at batch 1 / 8 / 32.
    cp_qkv_table: bool = True
    # The code predictor's GEMV passes (cp_gemv_rows; with cp_fused_attention, else it does nothing) run each
    # layer's attention and o product as one launch (kernels/cp_attention_o.py: a program a kv head and block of
    # o's features, the partial products summed in int64 fixed point, which gate/up and down read), 4 launches a
    # layer instead of 5. Run 23 (interleaved pairs): frame 1.510 -> 1.449 ms at batch 1, 1.864 -> 1.817 at 2
    # (cp_launch.ATTENTION_O_LAUNCH).
    cp_attention_o: bool = True
    # The code predictor's PDL passes let the next launch start before the wait of each launch that may
    # (cp_launch.EARLY_TRIGGER_LAUNCHES: qkv, attention + o, down, the head, the draws but a frame's last;
    # `backend.PDL_EARLY`), so that two launches ahead load their weights while the one before them finishes; gate/up
    # still waits first. Run 26 (bench.latency --experiments early_trigger, three interleaved rounds): frame 1.449 ->
    # 1.402 ms at batch 1, 1.785 -> 1.769 at 2. The same in the rows passes (cp_rows_pdl; cp_launch.ROWS_EARLY_LAUNCHES:
    # every launch but qkv, a frame's last draw never): run 33 (bench.latency --experiments cp_gemm_rows, three
    # interleaved rounds, call 4) frame 1.608 / 1.871 / 2.284 -> 1.569 / 1.706 / 2.196 ms at batch 8 / 16 / 32.
    cp_early_trigger: bool = True
    # The code predictor's batch-1 passes 1-14 as one persistent CUDA kernel each (kernels/cuda/cp_pass.cu: the
    # pass's 20 steps in one launch, each step's outputs handed to the next as tagged words, the weights streamed ahead
    # of the products), built by nvcc at load (kernels/cp_pass.py); True: required, None: where it
    # can run (an sm90 GPU, nvcc, the qkv table and PDL passes), else the Triton passes. Off: run 28 (bench.latency
    # --experiments cp_persistent) measured 1.765 ms a frame against the Triton passes' 1.41 (1.405 with no weights),
    # run 29 its best way 1.787 against 1.38 (kernels/cp_pass.py DEFAULT_MACROS picks the way this option builds).
    cp_persistent: bool | None = False
    # The code predictor's draws (codebooks 1-15) as a CUDA kernel (kernels/cuda/cp_draw.cu through
    # kernels/cp_draw.py: one CTA a row, its block-wide sums single warp reductions and one barrier each), built by
    # nvcc at load; True: required, None: where it can run (an sm90 GPU and nvcc, bf16 logits), else the Triton draw
    # (kernels/sample.py). Run 30 (bench.latency --experiments cp_draw, two calls of 5 interleaved rounds): frame
    # 1.375 -> 1.365 and 1.386 -> 1.373 ms at batch 1, 2.498 -> 2.487 and 2.494 -> 2.481 at 8, 2.676 -> 2.658 and
    # 2.684 -> 2.669 at 32; the ids those of the Triton draw.
    cp_cuda_draw: bool | None = None
    # The code predictor's batch-1 products (qkv, gate/up, down, the heads: one row of x) on the tensor cores as a CUDA
    # kernel (kernels/cuda/cp_gemv.cu through kernels/cp_gemv.py: a warp's weights the A operand of mma.sync in
    # registers, x the B operand, so that after the PDL wait a warp does ~16 MMAs where the Triton kernel converts,
    # multiplies and reduces each weight), built by nvcc at load; True: required, None: where it can run (an sm90 GPU
    # and nvcc, the PDL passes, bf16), else the Triton GEMVs. Run 31 (bench.latency --experiments cp_gemv, 5
    # interleaved rounds): code-predictor frame 1.368 -> 1.145 ms at batch 1, frame step 2.405 -> 2.183 (256 columns a
    # warp; 512: 1.163).
    cp_cuda_gemv: bool | None = None
    # The code predictor's passes of 3-32 token rows (those of batches 3-32, the prefills of 2-16) on that kernel's rows
    # (`cp_gemm_rows`: qkv, gate/up with SwiGLU, o and down as split-K partials the next norm sums, the heads) with
    # every launch of the pass under programmatic dependent launch, each product's weights loaded before its wait;
    # where cp_cuda_gemv runs. Off: the same products without PDL. Run 32 (bench.latency --experiments cp_gemm_rows, 3
    # interleaved rounds, call 1): code-predictor frame at batch 4 / 8 / 16 / 32 2.133 / 2.176 / 2.462 / 3.073 ms
    # without, 1.558 / 1.641 / 2.130 / 2.895 with (one block of w a CTA; with kernels/cp_gemv.py ROWS_BLOCKS'
    # blocks, call 2: 1.569 / 1.885 / 2.285 at 8 / 16 / 32, against cuBLAS' 2.472 / 2.557 / 2.633).
    cp_rows_pdl: bool = True
    # In those passes the norms inside the products (kernels/cp_gemv.py: qkv, gate/up and the heads RMS-normalise their
    # input in the prologue, o and down add the residual in the epilogue, the last CTA of a column of w summing the
    # slices of K in a thread block cluster): 5 launches a layer, not 7 (two norm launches of ~2.4 µs each at 32 rows,
    # run 32's profile); where the kernel takes each product so (`CodePredictorRunner.norm_rows`). Off (the default):
    # the norms as launches of their own. Slower at 8 and 32 rows: every CTA of qkv, gate/up and the head normalises
    # all of x (32 x 1,024 at batch 32; the norm launch spreads it over 32 CTAs). Run 33 (bench.latency --experiments
    # cp_gemm_rows, three interleaved rounds), frame at batch 8 / 16 / 32: call 2 1.607 / 1.867 / 2.288 ms without,
    # 1.668 / 1.832 / 2.409 with, 1.507 / 1.667 / 2.122 with and the norm's arithmetic left out (a bound: wrong
    # codes); call 4 with the early triggers (cp_early_trigger) 1.569 / 1.706 / 2.196 without, 1.594 / 1.853 / 2.564
    # with.
    cp_rows_norms: bool = False
    # Prompts of at most this many rows (a captured prefill graph: its bucket) prefill with the talker's
    # products on the tensor-core GEMV (kernels/gemv.py `mma`, the norms and residual adds fused in,
    # talker_launch.PREFILL_MMA_LAUNCH) instead of cuBLAS; 0: none. Prefills of 12 / 40 rows took 1.55 / 1.69 ms
    # on cuBLAS (run 14; a talker step reading the same 2.8 GB at batch 1 takes 1.24), the largest part of
    # first audio on the socket. Off: run 15 measured +1.2 ms of device time; run 16's profile: the norm
    # prologues of qkv and gate/up cost 9-12 µs each, and without them the products only tie cuBLAS.
    prefill_mma_rows: int = 0
    # The talker's GEMV steps (talker_gemv_rows) whose every row attends to at most this many positions
    # run the q/k norm, RoPE, K/V store and attention as one launch a layer (kernels/talker_attention.py,
    # one program a kv head over the whole context; a feed graph of its own per bucket), the rest the split
    # attention after a q/k norm launch; 0: never. Run 21 (talker_launch.TALKER_QK_ATTENTION_LAUNCH): talker step at
    # batch 1 1.220 -> 1.099 ms at 12 positions, 1.223 -> 1.181 at 256, 1.225 against 1.249 at 320.
    talker_qk_attention_context: int = 256
    # The cuBLAS steps' down and o products (the code predictor's passes past cp_gemv_rows, the talker's steps past
    # talker_gemv_rows) as this many fp32 split-K partials in one batched cuBLAS launch each, summed by the norm
    # after them (kernels/rms_norm.py `split_k_partials`, runtime/fused.py `SplitK`), in place of cuBLAS' own
    # product (at 8-64 rows its down is split-K with a reduce launch of its own); 0: cuBLAS' product. Each must
    # divide its product's K (down: the intermediate size; o: heads x head dim). Run 25 (bench.latency --experiments
    # cp_split_k / talker_split_k, interleaved rounds), code-predictor frame at batch 8 / 32 / 64, call 1: cuBLAS
    # 2.804 / 2.960 / 3.094 ms, down in 2 / 3 / 4 / 6 partials 2.637 / 2.792 / 2.904, 2.615 / 2.790 / 2.908,
    # 2.613 / 2.788 / 2.899, 2.631 / 2.795 / 2.913; call 2: cuBLAS 2.821 / 2.995 / 3.102, down 4 2.628 / 2.829 /
    # 2.911, with o in 2 / 4 2.568 / 2.773 / 2.841, 2.538 / 2.743 / 2.818 (gate/up in 2 or 4, summed by SiLU-mul:
    # 0.05-0.19 ms slower); call 4 (around these defaults): the same order, o or down in 8 slower. Talker step at
    # batch 32 / 64: cuBLAS 1.697 / 1.779, down 2 1.618 / 1.694 (4: 1.617 / 1.719); call 2: down 2 1.633 / 1.701,
    # with o in 2 1.628 / 1.683 (4: 1.635 / 1.707).
    cp_down_splits: int = 4
    cp_o_splits: int = 4
    # The talker's (its cuBLAS steps and every prompt's prefill: run 26, a 12-row prefill 92-123 us shorter in three
    # A/Bs, 40 and 120 rows mixed; runner.ModelRunner.prefill_split_k has the figures).
    talker_down_splits: int = 2
    talker_o_splits: int = 2
    # The talker's decode attention: 2 CUDA-core products, 3 tensor-core ones (kernels/decode_attention.py).
    # Run 10: version 3 faster at every batch (talker step at batch 64, 448 positions: 2.56 ms against 4.76).
    attention_version: int = 3

    def problems(self) -> list[tuple[str, str]]:
        """(field, what is wrong with it) for each bad value; empty if none."""
        out = []
        for name in ("talker_gemv_rows", "cp_gemv_rows"):
            if not 0 <= getattr(self, name) <= MAX_GEMV_ROWS:
                out.append((name, f"must be in 0..{MAX_GEMV_ROWS}, got {getattr(self, name)}"))
        if self.cp_mma_rows and not self.cp_gemv_rows < self.cp_mma_rows <= MAX_CP_MMA_ROWS:
            out.append(("cp_mma_rows", f"must be 0 or above cp_gemv_rows ({self.cp_gemv_rows}) and at most "
                                       f"{MAX_CP_MMA_ROWS}, got {self.cp_mma_rows}"))
        if self.talker_qk_attention_context < 0:
            out.append(("talker_qk_attention_context", f"must be >= 0, got {self.talker_qk_attention_context}"))
        if not 0 <= self.prefill_mma_rows <= MAX_PREFILL_MMA_ROWS:
            out.append(("prefill_mma_rows", f"must be in 0..{MAX_PREFILL_MMA_ROWS}, got {self.prefill_mma_rows}"))
        if self.cp_pdl and not self.cp_gemv_rows:
            out.append(("cp_pdl", "needs cp_gemv_rows > 0 (PDL launches the code predictor's GEMVs)"))
        if self.cp_persistent and not (self.cp_gemv_rows and self.cp_qkv_table and self.cp_pdl is not False):
            out.append(("cp_persistent", "needs the code predictor's PDL GEMV passes and its qkv table"))
        if self.cp_cuda_gemv and not (self.cp_gemv_rows and self.cp_pdl is not False):
            out.append(("cp_cuda_gemv", "needs the code predictor's PDL GEMV passes"))
        if self.talker_pdl and not self.talker_gemv_rows:
            out.append(("talker_pdl", "needs talker_gemv_rows > 0 (PDL launches the talker's GEMV steps)"))
        for name in ("cp_down_splits", "cp_o_splits", "talker_down_splits", "talker_o_splits"):
            if not 0 <= getattr(self, name) <= MAX_SPLIT_K:
                out.append((name, f"must be in 0..{MAX_SPLIT_K}, got {getattr(self, name)}"))
        if self.attention_version not in (2, 3):
            out.append(("attention_version", f"must be 2 or 3, got {self.attention_version}"))
        return out

    def validate(self) -> FastPathOptions:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(f"{name} {msg}" for name, msg in problems))
        return self


def split_k_for(stack, down: int, o: int, names: tuple[str, str], device_type: str = "cpu"):
    """The split-K partials of a decoder stack's down and o products (`fused.SplitK`; cp_* or talker_* options,
    named by `names`), checked against its intermediate size and attention width, which each slice must cut
    evenly. On a GPU whose torch has no fp32-output bmm (`rms_norm.bmm_has_fp32_out`) none, with a warning: the
    products stay cuBLAS'."""
    from ..kernels.rms_norm import bmm_has_fp32_out
    from .fused import SplitK

    for splits, k, name, what in ((down, stack.intermediate, names[0], "intermediate size"),
                                  (o, stack.q_size, names[1], "attention width (heads x head dim)")):
        if k % max(splits, 1):
            raise ValueError(f"{name} {splits} must divide the {what} {k}")
    if (down or o) and device_type == "cuda" and not bmm_has_fp32_out():
        log.warning("%s / %s: this torch has no fp32-output bmm (torch.bmm out_dtype); the "
                                            "products stay cuBLAS'", *names)
        return SplitK()
    return SplitK(o=o, down=down)
