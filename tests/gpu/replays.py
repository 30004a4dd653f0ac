"""What the Triton-path GPU tests share (tests/gpu/test_triton_path_gpu.py, tests/gpu/test_code_predictor_gpu.py): a
relative error, graph replays as the engine runs them, and the check that PDL launches give the output of the same
kernels without PDL."""

from __future__ import annotations

import torch


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def graph_replays(fn, n: int = 20, before=None) -> list[torch.Tensor]:
    """fn() captured in a CUDA graph as the engine runs it (compiled outside the capture), its output
    after each of n replays: a race need not show every time. before(i): queued ahead of replay i (the
    tests alternate the step's input there, so that a read of the previous replay's values shows)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    outs = []
    for i in range(n):
        if before is not None:
            before(i)
        graph.replay()
        torch.cuda.synchronize()
        outs.append(out.clone())
    return outs


def assert_pdl_gives_the_output_without(outs: dict[bool, list[torch.Tensor]], what: str) -> None:
    """outs[pdl]: the replays with and without PDL of the same kernels, their inputs alternating between two
    (replay i equals replay i % 2). In this order, so that a failure says which."""
    differ = [i for i, got in enumerate(outs[False]) if not torch.equal(got, outs[False][i % 2])]
    assert not differ, f"replays {differ} without PDL differ from their input's first: nondeterministic kernels"
    differ = [i for i, got in enumerate(outs[True]) if not torch.equal(got, outs[True][i % 2])]
    assert not differ, (f"replays {differ} with PDL differ from their input's first: a kernel reads before its input "
                        "is written")
    differ = [i for i in (0, 1) if not torch.equal(outs[True][i], outs[False][i])]
    assert not differ, (
        f"every replay with PDL gives the same {what}, but not those without (input {differ}): the PDL-compiled "
        "kernels round differently, or a race that repeats")


# gemv `row_blocks`: each program streams four blocks of two whole rows, the next block's weights loading while
# the last one's are summed (8 warps: two blocks of the talker's rows in registers without spilling)
ROW_BLOCKS = dict(block_n=2, num_warps=8, row_blocks=4)
