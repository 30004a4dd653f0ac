"""The persistent code-predictor pass (kernels/cuda/cp_pass.cu) on the CPU machine: what can be checked without a GPU.
Its shapes' limits and shared memory; the kernel compiled for sm_90a without spills; and the parameter struct that
kernels/cp_pass.py builds with ctypes laid out as the compiled C++ struct is (a host program built from the same
source prints sizeof / offsetof). Its arithmetic runs only on an sm90 GPU: tests/gpu/test_cp_pass_gpu.py. The
compiling tests need nvcc and are skipped without it (not counted as passing)."""

from __future__ import annotations

import ctypes
import re
import subprocess

import pytest

from tts_engine.kernels import cp_pass, cuda_build
from tts_engine.kernels.cp_pass import CpPassShapes

SHAPES_1_7B = CpPassShapes(hidden=1024, intermediate=3072, heads=16, kv_heads=8, head_dim=128, layers=5, codes=2048,
                           positions=16)
H200_SMS = 132
SHARED_LIMIT = 227 * 1024  # an sm90 block's opt-in shared memory


def test_the_1_7b_shapes_fit_an_h200():
    assert SHAPES_1_7B.problems() == []
    # the odd steps' largest slice is gate/up's, 24 intermediate features' gate and up rows of 1,024 bf16; the even
    # steps' down's, 8 rows of 3,072
    assert SHAPES_1_7B.slot_bytes(H200_SMS) == (8 * 3072 * 2, 2 * 24 * 1024 * 2)
    assert SHAPES_1_7B.shared_bytes(H200_SMS) <= SHARED_LIMIT
    # fewer SMs, larger slices: past the limit, and the class says so by the number
    assert SHAPES_1_7B.shared_bytes(100) > SHARED_LIMIT


@pytest.mark.parametrize("change,words", [(dict(head_dim=64), "head_dim"), (dict(kv_heads=3), "query heads"),
                                          (dict(positions=17), "positions"), (dict(hidden=1000), "hidden")])
def test_shapes_the_kernel_does_not_hold_are_named(change, words):
    from dataclasses import replace

    problems = replace(SHAPES_1_7B, **change).problems()
    assert problems and any(words in p for p in problems)


def test_unsupported_says_why_on_a_cpu():
    import torch

    assert cp_pass.unsupported(torch.device("cpu")) == "not a CUDA device"


def test_trace_phases_reads_the_stamps_as_the_kernel_writes_them():
    """Two layers (8 steps: att gu down, qkv att gu down, head) at 2 GHz: every step 1 µs poll, 0.25 cache, 0.75 norm,
    0.5 weights, 2 product, after a 3 µs wait; one pass traced, the other row never written."""
    steps = 8
    clock, row = 1000, [0, 0, 1000]
    row.append(clock + 6000)  # the wait: 6,000 clocks, 3 µs
    clock += 6000
    for _ in range(steps):
        for d in (2000, 500, 1500, 1000, 4000):
            clock += d
            row.append(clock)
    span_ns = (clock - 1000) / 2
    row[0], row[1] = 10_000, 10_000 + int(span_ns)
    got = cp_pass.trace_phases([row, [0] * len(row)], layers=2)
    assert got["passes"] == 1 and got["launch"] == pytest.approx(span_ns / 1e3)
    assert got["wait"] == pytest.approx(3.0)
    for kind in ("att", "gu", "down", "qkv", "head"):
        want = {"poll": 1.0, "cache": 0.25, "norm": 0.75, "weights": 0.5, "product": 2.0}
        assert got[kind] == pytest.approx(want), kind
    assert cp_pass.trace_phases([[0] * len(row)], layers=2) == {}


needs_nvcc = pytest.mark.skipif(cuda_build.nvcc() is None, reason="no nvcc on this machine")


@needs_nvcc
@pytest.mark.parametrize("macros", [(), ("-DCP_REG_WEIGHTS=1",),
                                    ("-DCP_REG_WEIGHTS=2", "-DCP_L2_AHEAD=2", "-DCP_TRACE=1"),
                                    ("-DCP_EARLY_RES=0", "-DCP_ATT_ONE_POLL=0")],
                         ids=["smem", "regs", "staged-l2-trace", "run28"])
def test_kernel_compiles_for_sm90a_without_spills(tmp_path, macros):
    done = subprocess.run([cuda_build.nvcc(), "-cubin", cuda_build.ARCH, "-O3", "-std=c++17", "-Xptxas", "-v",
                           *SHAPES_1_7B.macros(), f"-DCP_CTAS={H200_SMS}", *macros, "-o", str(tmp_path / "k.cubin"),
                           str(cp_pass.SOURCE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", done.stderr)
    registers = re.findall(r"Used (\d+) registers", done.stderr)
    assert spills and all(s == ("0", "0") for s in spills), done.stderr
    # one CTA of 8 warps an SM: the register file holds it
    assert registers and int(registers[0]) * 32 * SHAPES_1_7B.kv_heads <= 65536


@needs_nvcc
def test_ctypes_parameters_match_the_compiled_struct(tmp_path):
    """kernels/cp_pass.py's ctypes mirror of CpLayer / CpPassParams against the C++ compiler's layout of them."""
    fields = ["x_in", "qkv0", "norm", "head", "cos", "sin", "qkv", "res0", "res1", "act", "logits", "launches", "error",
              "trace", "pos", "eps", "scale", "slot1_at", "cache_at"]
    probe = tmp_path / "probe.cu"
    probe.write_text(f'#include "{cp_pass.SOURCE}"\n#include <cstdio>\n#include <cstddef>\nint main() {{\n'
                     '  printf("layer %zu %zu\\n", sizeof(CpLayer), offsetof(CpLayer, v_cache));\n'
                     '  printf("params %zu\\n", sizeof(CpPassParams));\n'
                     + "".join(f'  printf("{f} %zu\\n", offsetof(CpPassParams, {f}));\n' for f in fields) + "}\n")
    exe = tmp_path / "probe"
    built = subprocess.run([cuda_build.nvcc(), cuda_build.ARCH, "-std=c++17", *SHAPES_1_7B.macros(),
                            f"-DCP_CTAS={H200_SMS}", "-o", str(exe), str(probe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    printed = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                                 check=True).stdout.splitlines())
    params = cp_pass._params_type(SHAPES_1_7B.layers)
    assert printed["layer"].split() == [str(ctypes.sizeof(cp_pass._Layer)), str(cp_pass._Layer.v_cache.offset)]
    assert int(printed["params"]) == ctypes.sizeof(params)
    for f in fields:
        assert int(printed[f]) == getattr(params, f).offset, f
