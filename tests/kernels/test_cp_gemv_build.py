"""The tensor-core products (kernels/cuda/cp_gemv.cu) on the CPU machine: what can be checked without a GPU. Every
product shape of the code predictor's passes compiled for sm_90a without local memory (a warp's weights stay in
registers), one row and rows, the rows kernel's copies of x all issued before its products, the layouts the kernel
refuses at compile time, the parameter struct that kernels/cp_gemv.py builds with
ctypes laid out as the C++ compiler lays it out, and a runner on the CPU keeping the Triton GEMVs. The products run only
on an sm90 GPU: tests/gpu/test_cp_gemv_gpu.py. The compiling tests need nvcc and are skipped without it (not counted as
passing)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import triton

from tests.kernels.struct_probe import assert_ctypes_layout
from tts_engine.kernels import cp_gemv, cuda_build
from tts_engine.runtime.options import FastPathOptions

needs_nvcc = pytest.mark.skipif(cuda_build.nvcc() is None, reason="no nvcc on this machine")

# (K, mode, norm, delta) of the code predictor's products: qkv and the heads, gate/up + SwiGLU with the attention + o
# sum added to x, down + residual with that sum added to the residual, o + residual (the passes without attention + o)
SHAPES = [(1024, 0, True, False), (1024, 2, True, True), (3072, 1, False, True), (2048, 1, False, False),
          (1024, 2, True, False)]


def _nvcc(tmp_path, *macros: str) -> subprocess.CompletedProcess:
    return subprocess.run([cuda_build.nvcc(), "-cubin", cuda_build.ARCH, "-O3", "-std=c++17", "-Xptxas", "-v",
                           *(f"-D{m}" for m in macros), "-o", str(tmp_path / "k.cubin"), str(cp_gemv.SOURCE)],
                          capture_output=True, text=True)


@needs_nvcc
@pytest.mark.parametrize("k,mode,norm,delta", SHAPES)
def test_kernel_compiles_for_sm90a_without_local_memory(tmp_path, k, mode, norm, delta):
    done = _nvcc(tmp_path, f"CG_K={k}", f"CG_KW={cp_gemv.KW}", f"CG_MODE={mode}", f"CG_NORM={int(norm)}",
                 f"CG_DELTA={int(delta)}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", done.stderr), done.stderr
    # ptxas -v names the registers; a warp's 256 columns of 16 rows are 64 of them
    used = int(re.search(r"Used (\d+) registers", done.stderr).group(1))
    assert 64 < used <= 128, done.stderr


# (K, mode, tiles, slices of K, columns a warp, blocks of 16 rows of w a CTA, norm) of the passes' rows products: qkv /
# the heads, gate/up + SwiGLU, o and down as split-K partials (a CTA 1,024 columns: kernels/cp_gemv.py ROWS_CTA_K),
# down whole; 128 columns a warp; 2 and 4 blocks a CTA; 64 rows; with the norm (qkv, the heads, gate/up), with the
# residual (o and down in slices, and whole)
ROWS_SHAPES = [(1024, 0, 4, 1, 256, 1, 0), (1024, 2, 4, 1, 256, 1, 0), (2048, 0, 4, 2, 256, 1, 0),
               (3072, 0, 4, 3, 256, 1, 0), (3072, 0, 4, 1, 256, 1, 0), (1024, 2, 1, 1, 256, 1, 0),
               (2048, 0, 2, 2, 256, 1, 0), (3072, 0, 4, 3, 128, 1, 0), (1024, 2, 4, 1, 256, 4, 0),
               (2048, 0, 4, 1, 256, 2, 0), (1024, 0, 2, 1, 256, 2, 0), (1024, 2, 8, 1, 256, 4, 0),
               (2048, 0, 8, 4, 256, 4, 0), (1024, 0, 4, 1, 256, 4, 1), (1024, 2, 4, 1, 256, 4, 1),
               (1024, 0, 8, 1, 256, 4, 1), (1024, 2, 1, 1, 256, 1, 1), (2048, 1, 4, 2, 256, 4, 0),
               (3072, 1, 4, 3, 256, 4, 0), (3072, 1, 8, 3, 256, 4, 0), (1024, 1, 2, 1, 256, 2, 0)]


@needs_nvcc
@pytest.mark.parametrize("k,mode,tiles,splits,kw,blocks,norm", ROWS_SHAPES)
def test_rows_kernel_compiles_without_local_memory(tmp_path, k, mode, tiles, splits, kw, blocks, norm):
    done = _nvcc(tmp_path, "CG_ROWS=1", f"CG_K={k}", f"CG_MODE={mode}", f"CG_NT={tiles}", f"CG_SPLIT={splits}",
                 f"CG_KW={kw}", f"CG_RB={blocks}", f"CG_NORM={norm}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cp_gemv'" not in done.stderr, "one kernel a cubin"
    rows = done.stderr[done.stderr.index("Function properties for cp_gemm_rows"):]
    assert re.search(r"0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", rows), done.stderr
    # x's fragments go through shared memory, so a lane holds only its weights (kw / 4 registers) and the sums
    used = int(re.search(r"Used (\d+) registers", rows).group(1))
    assert used <= kw // 4 + 64, done.stderr


@needs_nvcc
@pytest.mark.parametrize("norm", [0, 1])
def test_rows_kernel_copies_every_fragment_of_x_before_its_first_product(tmp_path, norm):
    """One round trip to L2 for x: every asynchronous copy (LDGSTS) comes before the first MMA in the SASS (ptxas
    spreads plain loads between the MMAs); with the norm, its weights' copy too (a loop of one copy a lane here)."""
    done = _nvcc(tmp_path, "CG_ROWS=1", "CG_K=1024", "CG_MODE=0", "CG_NT=4", f"CG_NORM={norm}")
    assert done.returncode == 0, done.stderr[-3000:]
    cuobjdump = shutil.which("cuobjdump") or Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not Path(cuobjdump).exists():
        pytest.skip("no cuobjdump (CUDA's, or the one Triton bundles)")
    sass = subprocess.run([str(cuobjdump), "-sass", str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert sass.returncode == 0, sass.stderr[-2000:]
    ops = re.findall(r"\b(LDGSTS|HMMA)\b", sass.stdout)
    assert ops.count("LDGSTS") in (4 * 8 + norm, 4 * 8 + 2 * norm) and ops.count("HMMA") == 4 * 8 * 2, ops
    assert ops.index("HMMA") > max(i for i, op in enumerate(ops) if op == "LDGSTS"), ops


@needs_nvcc
@pytest.mark.parametrize("macros,said", [(("CG_K=1000", "CG_MODE=0"), "whole warps"),
                                         (("CG_K=1024", "CG_MODE=1", "CG_NORM=1"), "takes no norm"),
                                         (("CG_K=1024", "CG_MODE=3"), "mode 0 plain"),
                                         (("CG_K=1024", "CG_MODE=0", "CG_NT=9"), "1-8 tiles"),
                                         (("CG_K=1024", "CG_MODE=0", "CG_KW=128"), "KW a multiple of 256"),
                                         (("CG_K=1024", "CG_MODE=0", "CG_RB=2"), "one block"),
                                         (("CG_ROWS=1", "CG_K=1024", "CG_MODE=0", "CG_DELTA=1"), "no delta"),
                                         (("CG_ROWS=1", "CG_K=1024", "CG_MODE=1", "CG_NORM=1"), "a norm before"),
                                         (("CG_ROWS=1", "CG_K=2048", "CG_MODE=0", "CG_NORM=1", "CG_SPLIT=2"),
                                          "whole rows"),
                                         (("CG_ROWS=1", "CG_K=1024", "CG_MODE=0", "CG_NORM=1", "CG_STAGES=2"),
                                          "whole rows"),
                                         (("CG_ROWS=1", "CG_K=2048", "CG_MODE=2", "CG_SPLIT=2"), "whole sums"),
                                         (("CG_ROWS=1", "CG_K=3072", "CG_MODE=0", "CG_SPLIT=5"), "whole warps")])
def test_layouts_the_kernel_does_not_hold_fail_to_compile(tmp_path, macros, said):
    done = _nvcc(tmp_path, *macros)
    assert done.returncode != 0 and said in done.stderr, done.stderr[-2000:]


@needs_nvcc
def test_ctypes_parameters_match_the_compiled_struct(tmp_path):
    assert_ctypes_layout(tmp_path, cp_gemv.SOURCE, "CpGemvParams", cp_gemv._Params, ("CG_K=1024", "CG_MODE=0"))


def test_a_cpu_runner_keeps_the_triton_gemvs_or_says_why_it_cannot():
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.code_predictor import CodePredictorRunner

    talker = random_model("tiny", torch.float32, "cpu", seed=0)[1].talker
    emb = talker.model.codec_embedding.weight
    runner = CodePredictorRunner(talker, emb, 2, use_triton=True, options=FastPathOptions(cp_cuda_gemv=None))
    assert runner.gemv_kernel is None and runner.product(1) is None
    with pytest.raises(RuntimeError, match="CUDA code-predictor products cannot run: not a CUDA device"):
        CodePredictorRunner(talker, emb, 2, use_triton=True, pdl=True, options=FastPathOptions(cp_cuda_gemv=True))


def test_the_option_needs_the_pdl_passes():
    from tts_engine.runtime.options import FastPathOptions

    assert ("cp_cuda_gemv", "needs the code predictor's PDL GEMV passes") in \
        FastPathOptions(cp_cuda_gemv=True, cp_gemv_rows=0).problems()
    assert not [p for p in FastPathOptions(cp_cuda_gemv=True).problems() if p[0] == "cp_cuda_gemv"]


def test_which_passes_run_under_pdl_on_the_rows():
    """`pass_pdl`: the GEMV passes as `uses_pdl` says; past them, with rows_pdl, the passes whose products the CUDA
    kernel's rows take (up to gemv_kernel_rows), and none where the kernel does not run (here: a CPU runner)."""
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.code_predictor import CodePredictorRunner

    talker = random_model("tiny", torch.float32, "cpu", seed=0)[1].talker
    runner = CodePredictorRunner(talker, talker.model.codec_embedding.weight, 2, use_triton=True, pdl=True,
                                 options=FastPathOptions(cp_gemv_rows=2, cp_cuda_gemv=None, cp_rows_pdl=True))
    assert runner.gemv_kernel is None and [runner.pass_pdl(r) for r in (1, 2, 3, 32)] == [True, True, False, False]
    runner.gemv_kernel = object()  # as if the kernel ran: only which passes it takes is asked here
    assert [runner.pass_pdl(r) for r in (1, 2, 3, 32, 33)] == [True, True, True, True, False]
    runner.gemv_kernel_rows = 16
    assert [runner.pass_pdl(r) for r in (16, 17)] == [True, False]
    runner.rows_pdl = False
    assert [runner.pass_pdl(r) for r in (1, 3)] == [True, False]
    runner.rows_pdl, runner.pdl = True, False
    assert not any(runner.pass_pdl(r) for r in (1, 3))


def test_the_rows_options_reach_the_runner():
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.options import FastPathOptions
    from tts_engine.runtime.runner import ModelRunner

    model = random_model("tiny", torch.float32, "cpu", seed=0)[1]
    for on in (True, False):
        runner = ModelRunner(model, max_slots=2, max_context=64, use_triton=False, use_graphs=False,
                             options=FastPathOptions(cp_rows_pdl=on))
        assert runner.code_predictor.rows_pdl is on


def test_the_rows_layout_policy():
    """`row_splits` and `row_blocks` (what `CpGemv` launches for a call of 2-64 rows), at the 1.7B code predictor's
    shapes: qkv [4096, 1024], gate/up [6144, 1024], the heads [2048, 1024], o [1024, 2048], down [1024, 3072]."""
    from tts_engine.kernels.cp_gemv import ROWS_BLOCKS, ROWS_CTA_K, ROWS_KW, row_blocks, row_splits, rows_fit

    assert [row_splits(k, 32, True, ROWS_CTA_K) for k in (1024, 2048, 3072)] == [1, 2, 3]
    assert row_splits(3072, 1, True, ROWS_CTA_K) == 1 and row_splits(3072, 32, False, ROWS_CTA_K) == 1
    assert row_splits(3072, 32, True, 2048) == 1, "a slice that does not divide K: whole"

    def blocks(n, k, rows, splits=1, min_ctas=0):
        return row_blocks(n, k, -(-rows // 8), splits, ROWS_KW, ROWS_BLOCKS, min_ctas)

    # the defaults by tiles of 8 rows: 1 / 2 / 4 / 4 blocks, and the last past the table's end
    assert [blocks(4096, 1024, r) for r in (8, 16, 24, 32, 64)] == [1, 2, 4, 4, 4]
    # 16 warps a CTA at most: whole o (8 warps of 256 columns) 2 blocks, whole down (12) 1, in slices of 1,024 4
    assert blocks(1024, 2048, 32) == 2 and blocks(1024, 3072, 32) == 1 and blocks(1024, 3072, 32, splits=3) == 4
    assert blocks(48, 1024, 32) == 1, "3 blocks of w: 4 and 2 do not divide them"
    assert blocks(2048, 1024, 32, min_ctas=64) == 2, "128 blocks of the head over at least 64 CTAs"
    assert blocks(4096, 1024, 64) == 4
    assert not rows_fit(3072, 8, 1, ROWS_KW) and rows_fit(3072, 4, 1, ROWS_KW), \
        "x's 3,072 columns of 64 rows do not fit a CTA's shared memory, of 32 rows they do"


def test_which_rows_launches_let_the_next_start_before_their_wait():
    """`rows_early` (cp_launch.ROWS_EARLY_LAUNCHES: never qkv, the launch ahead of an attention that reads the cache
    before its wait): the PDL launches it names trigger early, the frame's last draw never; a name it may not hold is
    refused."""
    from tts_engine.checkpoint import random_model
    from tts_engine.kernels.backend import PDL_EARLY
    from tts_engine.runtime.code_predictor import ROWS_EARLY_LAUNCHES, CodePredictorRunner

    talker = random_model("tiny", torch.float32, "cpu", seed=0)[1].talker
    runner = CodePredictorRunner(talker, talker.model.codec_embedding.weight, 2, use_triton=True, pdl=True,
                                 options=FastPathOptions(cp_gemv_rows=2, cp_cuda_gemv=None, cp_early_trigger=False))
    runner.gemv_kernel = object()  # as if the kernel ran: only which launches trigger early is asked here
    assert "qkv" not in ROWS_EARLY_LAUNCHES
    assert runner.rows_trigger("o", True) is True and runner.draw_pdl(8, True, last=False) is True
    runner.rows_early = ROWS_EARLY_LAUNCHES
    assert [runner.rows_trigger(name, True) for name in ("o", "head", "qkv")] == [PDL_EARLY, PDL_EARLY, True]
    assert runner.rows_trigger("o", False) is False
    assert runner.draw_pdl(8, True, last=False) == PDL_EARLY and runner.draw_pdl(8, True, last=True) is True
    runner.rows_early = ("qkv",)
    with pytest.raises(ValueError, match="rows_early names launches of"):
        runner.rows_trigger("o", True)
    early = CodePredictorRunner(talker, talker.model.codec_embedding.weight, 2, use_triton=True, pdl=True,
                                options=FastPathOptions(cp_cuda_gemv=None))
    assert early.rows_early == ROWS_EARLY_LAUNCHES, "the early triggers' option covers the rows passes"
