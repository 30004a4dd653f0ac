"""Which kernels the fast path runs where several compute the same step: the one place their defaults
live. Each choice is tested against plain torch; the defaults are the faster side of an H200 A/B
(docs/performance.md). Runners take the object whole; benchmarks set it in code."""

from __future__ import annotations

import logging
from dataclasses import dataclass

# Past a few token rows cuBLAS is faster than the CUDA-core GEMVs (it takes ~the same time for
# 1 or 16 rows; a GEMV's cost grows with its rows).
MAX_GEMV_ROWS = 4
MAX_SPLIT_K = 16  # split-K partials of a product (each an fp32 [rows, N] that the launch after it reads)
# The codec's dense convs as GEMMs over their input windows while those hold at most this many elements:
# past it cuDNN's implicit GEMM wins (without a limit the last blocks' windows are tens of MB to copy).
CODEC_WINDOW_MAX = 1 << 24
# The codec's numerics a server may choose (settings' [engine] codec_precision; runtime/codec_runner.py).
CODEC_PRECISIONS = ("fp32", "tf32", "bf16")


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FastPathOptions:
    # Talker decode steps of at most this many rows run their products through kernels/gemv.py
    # (the norms and residual adds fused in; `fused.decoder_step_gemv`), larger ones through cuBLAS:
    # at batch 1 the GEMVs read the weights once with fewer launches.
    talker_gemv_rows: int = 1
    # The same for the code predictor's passes (a pass holds b rows, its prefill 2 b).
    cp_gemv_rows: int = 2
    # The code predictor's GEMV passes of 1-2 rows with programmatic dependent launch, so that each
    # launch loads its weights while the one before it finishes; None: where the device supports it
    # (compiled Triton on sm90+).
    cp_pdl: bool | None = None
    # The talker's GEMV steps (talker_gemv_rows) with programmatic dependent launch, every kernel of the
    # step, the products on whole rows of w (talker_launch.TALKER_PDL_LAUNCH); None: where supported (sm90+).
    talker_pdl: bool | None = None
    # The code predictor's q/k norm + RoPE + K/V store fused into its attention kernel
    # (kernels/cp_attention.py `cp_qk_attention`): one launch a layer fewer, 75 a frame.
    cp_fused_attention: bool = True
    # Passes 1-14 of the code predictor take their first layer's qkv product from a table made at load
    # (`CodePredictorRunner.first_layer_qkv_table`, 235 MB at bf16: the pass's input is a function of the
    # code the draw before it picked), gathered by that draw: a product and a launch fewer a pass.
    cp_qkv_table: bool = True
    # The code predictor's GEMV passes (cp_gemv_rows; with cp_fused_attention, else it does nothing) run each
    # layer's attention and o product as one launch (kernels/cp_attention_o.py: a program a kv head and block of
    # o's features, the partial products summed in int64 fixed point, which gate/up and down read), 4 launches a
    # layer instead of 5 (cp_launch.ATTENTION_O_LAUNCH).
    cp_attention_o: bool = True
    # The code predictor's PDL passes let the next launch start before the wait of each launch that may
    # (cp_launch.EARLY_TRIGGER_LAUNCHES and, in the rows passes (cp_rows_pdl), ROWS_EARLY_LAUNCHES;
    # `backend.PDL_EARLY`), so that two launches ahead load their weights while the one before them finishes.
    cp_early_trigger: bool = True
    # The code predictor's draws (codebooks 1-15) as a CUDA kernel (kernels/cuda/cp_draw.cu through
    # kernels/cp_draw.py: one CTA a row, its block-wide sums single warp reductions and one barrier each), built by
    # nvcc at load; True: required, None: where it can run (an sm90 GPU and nvcc, bf16 logits), else the Triton draw
    # (kernels/sample.py), which draws the same ids.
    cp_cuda_draw: bool | None = None
    # The code predictor's batch-1 products (qkv, gate/up, down, the heads: one row of x) on the tensor cores as a CUDA
    # kernel (kernels/cuda/cp_gemv.cu through kernels/cp_gemv.py: a warp's weights the A operand of mma.sync in
    # registers, x the B operand, so that after the PDL wait a warp does ~16 MMAs where the Triton kernel converts,
    # multiplies and reduces each weight), built by nvcc at load; True: required, None: where it can run (an sm90 GPU
    # and nvcc, the PDL passes, bf16), else the Triton GEMVs.
    cp_cuda_gemv: bool | None = None
    # The code predictor's passes of 3-32 token rows (those of batches 3-32, the prefills of 2-16) on that kernel's rows
    # (`cp_gemm_rows`: qkv, gate/up with SwiGLU, o and down as split-K partials the next norm sums, the heads) with
    # every launch of the pass under programmatic dependent launch, each product's weights loaded before its wait;
    # where cp_cuda_gemv runs. Off: the same products without PDL.
    cp_rows_pdl: bool = True
    # The talker's GEMV steps (talker_gemv_rows) whose every row attends to at most this many positions
    # run the q/k norm, RoPE, K/V store and attention as one launch a layer (kernels/talker_attention.py,
    # one program a kv head over the whole context; a feed graph of its own per bucket), the rest the split
    # attention after a q/k norm launch (past ~300 positions one program a kv head is the slower); 0: never.
    talker_qk_attention_context: int = 256
    # The cuBLAS steps' down and o products (the code predictor's passes past cp_gemv_rows, the talker's steps past
    # talker_gemv_rows and every prompt's prefill) as this many fp32 split-K partials in one batched cuBLAS launch
    # each, summed by the norm after them (kernels/rms_norm.py `split_k_partials`, runtime/fused.py `SplitK`), in place
    # of cuBLAS' own product (at 8-64 rows its down is split-K with a reduce launch of its own); 0: cuBLAS' product.
    # Each must divide its product's K (down: the intermediate size; o: heads x head dim). More partials than these
    # (8), or gate/up split too, are slower.
    cp_down_splits: int = 4
    cp_o_splits: int = 4
    talker_down_splits: int = 2
    talker_o_splits: int = 2
    # The codec (CUDA; model/codec.py `use_fused_kernels`): its dense convs as GEMMs over their input windows while
    # those hold at most this many elements, cuDNN past it (0: cuDNN always); its window transformer's RoPE and K/V
    # window as one kernel a layer instead of nine torch ops (kernels/codec_rope_kv.py); each streaming conv's
    # concatenation, history shift and window columns as one launch instead of two or three copies
    # (kernels/conv_window.py). Each lowers a stream's first one-frame chunk and the batched chunks. The decoder
    # blocks' activations channels-last: no layout conversion around their convs (quicker for batched chunks; a
    # lone one-frame chunk is slower, its dilated convs leaving the window GEMMs for cuDNN: docs/performance.md);
    # a residual unit's first activation inside its dilated conv's window kernel: one pass fewer.
    codec_window_max: int = CODEC_WINDOW_MAX
    codec_rope_kv: bool = True
    codec_conv_windows: bool = True
    codec_channels_last: bool = True
    codec_act_in_window: bool = True

    def problems(self) -> list[tuple[str, str]]:
        """(field, what is wrong with it) for each bad value; empty if none."""
        out = []
        for name in ("talker_gemv_rows", "cp_gemv_rows"):
            if not 0 <= getattr(self, name) <= MAX_GEMV_ROWS:
                out.append((name, f"must be in 0..{MAX_GEMV_ROWS}, got {getattr(self, name)}"))
        if self.talker_qk_attention_context < 0:
            out.append(("talker_qk_attention_context", f"must be >= 0, got {self.talker_qk_attention_context}"))
        if self.cp_pdl and not self.cp_gemv_rows:
            out.append(("cp_pdl", "needs cp_gemv_rows > 0 (PDL launches the code predictor's GEMVs)"))
        if self.cp_cuda_gemv and not (self.cp_gemv_rows and self.cp_pdl is not False):
            out.append(("cp_cuda_gemv", "needs the code predictor's PDL GEMV passes"))
        if self.talker_pdl and not self.talker_gemv_rows:
            out.append(("talker_pdl", "needs talker_gemv_rows > 0 (PDL launches the talker's GEMV steps)"))
        for name in ("cp_down_splits", "cp_o_splits", "talker_down_splits", "talker_o_splits"):
            if not 0 <= getattr(self, name) <= MAX_SPLIT_K:
                out.append((name, f"must be in 0..{MAX_SPLIT_K}, got {getattr(self, name)}"))
        if self.codec_window_max < 0:
            out.append(("codec_window_max", f"must be >= 0, got {self.codec_window_max}"))
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
