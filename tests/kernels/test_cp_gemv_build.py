"""The one-row tensor-core products (kernels/cuda/cp_gemv.cu) on the CPU machine: what can be checked without a GPU.
Every product shape of the code predictor's passes compiled for sm_90a without local memory (a warp's weights stay in
registers), the layouts the kernel refuses at compile time, the parameter struct that kernels/cp_gemv.py builds with
ctypes laid out as the C++ compiler lays it out, and a runner on the CPU keeping the Triton GEMVs. The products run only
on an sm90 GPU: tests/gpu/test_cp_gemv_gpu.py. The compiling tests need nvcc and are skipped without it (not counted as
passing)."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from tests.kernels.struct_probe import assert_ctypes_layout
from tts_engine.kernels import cp_gemv, cuda_build

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


@needs_nvcc
@pytest.mark.parametrize("k,mode,tiles", [(1024, 0, 4), (1024, 2, 4), (3072, 0, 4), (2048, 0, 2), (1024, 2, 1)])
def test_rows_kernel_compiles_without_local_memory(tmp_path, k, mode, tiles):
    done = _nvcc(tmp_path, f"CG_K={k}", f"CG_MODE={mode}", f"CG_NT={tiles}")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = done.stderr[done.stderr.index("Function properties for cp_gemm_rows"):]
    assert re.search(r"0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", rows), done.stderr
    assert "cp_gemm_rows" not in _nvcc(tmp_path, f"CG_K={k}", "CG_MODE=1").stderr, "no rows kernel with a residual"


@needs_nvcc
@pytest.mark.parametrize("macros,said", [(("CG_K=1000", "CG_MODE=0"), "whole warps"),
                                         (("CG_K=1024", "CG_MODE=1", "CG_NORM=1"), "takes no norm"),
                                         (("CG_K=1024", "CG_MODE=3"), "mode 0 plain"),
                                         (("CG_K=1024", "CG_MODE=0", "CG_NT=5"), "1-4 tiles")])
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
    runner = CodePredictorRunner(talker, emb, 2, use_triton=True, gemv_rows=2, cuda_gemv=None)
    assert runner.gemv_kernel is None and runner.product(1) is None
    with pytest.raises(RuntimeError, match="CUDA code-predictor products cannot run: not a CUDA device"):
        CodePredictorRunner(talker, emb, 2, use_triton=True, gemv_rows=2, cuda_gemv=True)


def test_the_option_needs_the_pdl_passes():
    from tts_engine.runtime.options import FastPathOptions

    assert ("cp_cuda_gemv", "needs the code predictor's PDL GEMV passes") in \
        FastPathOptions(cp_cuda_gemv=True, cp_gemv_rows=0).problems()
    assert not [p for p in FastPathOptions(cp_cuda_gemv=True).problems() if p[0] == "cp_cuda_gemv"]
