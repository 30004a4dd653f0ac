"""The CUDA code-predictor draw (kernels/cuda/cp_draw.cu) on the CPU machine: what can be checked without a GPU. The
layouts it refuses; the kernel compiled for sm_90a without local memory (no spills, no stack: a row's scores stay in
registers); the parameter struct that kernels/cp_draw.py builds with ctypes laid out as the C++ compiler lays it out;
and a runner on the CPU keeping the Triton draw. Its draws run only on an sm90 GPU: tests/gpu/test_cp_draw_gpu.py. The
compiling tests need nvcc and are skipped without it (not counted as passing)."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from tests.kernels.struct_probe import assert_ctypes_layout
from tts_engine.kernels import cp_draw, cuda_build
from tts_engine.runtime.options import FastPathOptions

needs_nvcc = pytest.mark.skipif(cuda_build.nvcc() is None, reason="no nvcc on this machine")


def test_layouts_the_kernel_does_not_hold_are_named():
    assert cp_draw.shape_problems(2048) == []
    assert cp_draw.shape_problems(4096) == []
    for vocab in (2000, 1024, 64, 16384):  # not whole 16-byte loads, or more than 32 ids a thread
        assert cp_draw.shape_problems(vocab), vocab
    assert cp_draw.unsupported(torch.device("cpu"), 2048) == "not a CUDA device"


@needs_nvcc
@pytest.mark.parametrize("vocab", [2048, 4096])
def test_kernel_compiles_for_sm90a_without_local_memory(tmp_path, vocab):
    done = subprocess.run([cuda_build.nvcc(), "-cubin", cuda_build.ARCH, "-O3", "-std=c++17", "-Xptxas", "-v",
                           f"-DCD_V={vocab}", f"-DCD_THREADS={cp_draw.THREADS}", "-o", str(tmp_path / "k.cubin"),
                           str(cp_draw.SOURCE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", done.stderr), done.stderr


@needs_nvcc
def test_ctypes_parameters_match_the_compiled_struct(tmp_path):
    assert_ctypes_layout(tmp_path, cp_draw.SOURCE, "CpDrawParams", cp_draw._Params, ("CD_V=2048",))


def test_a_cpu_runner_keeps_the_triton_draw_or_says_why_it_cannot():
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.code_predictor import CodePredictorRunner

    talker = random_model("tiny", torch.float32, "cpu", seed=0)[1].talker
    emb = talker.model.codec_embedding.weight
    runner = CodePredictorRunner(talker, emb, 2, use_triton=True, options=FastPathOptions(cp_cuda_draw=None))
    assert runner.draw_kernel is None
    with pytest.raises(RuntimeError, match="CUDA code-predictor draw cannot run: not a CUDA device"):
        CodePredictorRunner(talker, emb, 2, use_triton=True, options=FastPathOptions(cp_cuda_draw=True))
