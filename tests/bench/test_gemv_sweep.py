"""bench.kernels' sweep rows -> the launch table a runner takes (the sweep itself needs a GPU)."""

from __future__ import annotations

import pytest

from bench.kernels import best_launch


def _row(op, us, batch=1, impl="gemv", **cfg):
    return {"op": op, "batch": batch, "impl": impl, **cfg, "us": us}


def test_the_fastest_timed_configuration_per_product_at_the_batch():
    ops = ("talker qkv", "talker o+residual", "talker gate_up+silu", "talker down+residual")
    # cuBLAS rows are not candidates, nor rows timed with the norm in the product's prologue (other work)
    sweep = [_row(op, 1.0, impl="cublas") for op in ops]
    for i, op in enumerate(ops):
        sweep += [_row(op, 9.0 + i, block_n=8, block_k=256, late_sum=True, stages=3, num_warps=4),
                  _row(op, 5.0 + i, block_n=4, block_k=512, late_sum=False, stages=1, num_warps=8),
                  _row(op, 1.0, batch=2, block_n=16, block_k=64, late_sum=False, stages=3, num_warps=4),
                  {"op": op, "batch": 1, "impl": "gemv", "block_n": 2, "error": "OutOfResources"},
                  _row(op, 0.5, norm=True, block_n=2, block_k=64, late_sum=False, stages=3, num_warps=4)]
    table = best_launch(sweep, "talker", 1)
    assert list(table) == ["qkv", "o", "gate_up", "down"]
    assert table["down"] == dict(block_n=4, block_k=512, late_sum=False, stages=1, num_warps=8)
    with pytest.raises(ValueError, match="no timed GEMV for 'cp qkv' at 1 rows"):
        best_launch(sweep, "cp", 1)
