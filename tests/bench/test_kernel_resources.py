"""bench.kernel_resources compiles a whole-row GEMV for sm90 on a machine without a GPU and reads its registers
and stack from the cubin (in a process of its own: the test session runs Triton's interpreter, which does not
compile)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def compiled_output(code: str, timeout: float = 300) -> str:
    """`code` run by a Python without TRITON_INTERPRET (so that Triton compiles) -> its stdout; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_a_whole_row_launch_compiles_for_sm90_and_reports_its_registers():
    code = ("from bench.kernel_resources import resources; "
            "print(resources(96, 0, True, 4, 4)); print(resources(96, 2, False, 4, 4, row_chunks=3)); "
            "print(resources(96, 1, False, 2, 4, residual_early=True, row_blocks=4))")
    lines = compiled_output(code).split("\n")
    assert [ln.split()[0].startswith("REG:") and ln.split()[1].startswith("STACK:") for ln in lines[:3]] == [True] * 3
    assert 0 < int(lines[0].split()[0][4:]) <= 255


def test_programs_an_sm_holds_by_registers_warps_and_its_program_limit():
    """sm90: 64K registers an SM, allocated 256 a warp at a time; 64 warps and 32 programs an SM."""
    from bench.kernel_resources import programs_per_sm

    assert programs_per_sm(78, 4) == 6 and programs_per_sm(95, 4) == 5  # run 22's gate/up: 6 blocks against 8
    assert programs_per_sm(80, 4) == 6 and programs_per_sm(81, 4) == 5  # 80 x 32 is 10 allocation units of 256
    assert programs_per_sm(31, 8) == 8  # warps bind: 64 / 8
    assert programs_per_sm(16, 1) == 32  # the program limit binds
    assert programs_per_sm(255, 8) == 1


def test_an_early_trigger_lets_the_next_launch_start_before_the_wait_a_late_one_after():
    """backend.pdl_start: with PDL 1 the compiled kernel waits for the launch before it (`griddepcontrol.wait`) and
    then lets the next start (`griddepcontrol.launch_dependents`); with PDL_EARLY the other way round; without PDL
    neither."""
    code = ("from bench.kernel_resources import whole_row_kernel\n"
            "for pdl in (0, 1, 2):\n"
            "    ptx = whole_row_kernel(96, 1, False, 4, 4, residual_early=True, pdl=pdl).asm['ptx']\n"
            "    print([ln.split()[0].rstrip(';') for ln in ptx.splitlines()\n"
            "           if ln.strip().startswith('griddepcontrol')])")
    out = compiled_output(code)
    assert out.split("\n")[:3] == [
        "[]", "['griddepcontrol.wait', 'griddepcontrol.launch_dependents']",
        "['griddepcontrol.launch_dependents', 'griddepcontrol.wait']"], out


def test_the_draw_compiles_for_sm90_with_each_top_k_search():
    """The draw's branches (the key bisection, the window search of 2-4 ways, top-p) must agree on their variables'
    types, which only a compiler checks: the code predictor's and the talker's draws, compiled for sm90."""
    code = ("from bench.kernel_resources import draw_kernel\n"
            "for window, ways, cb0 in ((0, 2, False), (12, 2, False), (8, 3, True), (6, 4, False)):\n"
            "    print('bar.sync' in draw_kernel(window, ways, cb0).asm['ptx'])")
    out = compiled_output(code, timeout=600)
    assert out.split() == ["True"] * 4, out


def test_an_l2_eviction_priority_is_a_cache_hint_on_the_weights_loads():
    """gemv's / cp_attention_o's `evict` compiled for sm90: the policy is in the PTX where asked for, and the default
    launch has none."""
    code = ("from bench.kernel_resources import attention_o_kernel, whole_row_kernel\n"
            "for evict in ('', 'evict_first', 'evict_last'):\n"
            "    for ptx in (whole_row_kernel(96, 2, True, 4, 4, evict=evict).asm['ptx'],\n"
            "                attention_o_kernel(64, 8, evict=evict).asm['ptx']):\n"
            "        print(evict or '-', 'evict_first' in ptx, 'evict_last' in ptx)\n")
    out = compiled_output(code).split("\n")
    assert out[:6] == ["- False False"] * 2 + ["evict_first True False"] * 2 + ["evict_last False True"] * 2
