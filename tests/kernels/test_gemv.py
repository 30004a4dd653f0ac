"""Small-batch GEMV with fused epilogues equals `gemv_ref` (F.linear, + residual, SwiGLU) to the
reference's rounding: fp32 to a few ulps, bf16 at most one ulp and almost all bit-identical."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.compare import assert_same_rounding
from tts_engine.kernels.backend import next_pow2
from tts_engine.kernels.gemv import gemv, gemv_ref

SHAPES = [(1, 64, 40), (3, 200, 96), (16, 130, 64)]  # (M, K, N): odd K and N, partial blocks


def assert_epilogues(x, w, r, what: str, **cfg) -> None:
    """gemv with launch settings cfg (norm included) equals gemv_ref plain, with the residual r, and SwiGLU."""
    norm = cfg.get("norm")
    assert_same_rounding(gemv(x, w, **cfg), gemv_ref(x, w, norm=norm), what)
    assert_same_rounding(gemv(x, w, residual=r, **cfg), gemv_ref(x, w, residual=r, norm=norm), f"{what} + residual")
    assert_same_rounding(gemv(x, w, silu_mul=True, **cfg), gemv_ref(x, w, silu_mul=True, norm=norm), f"{what} swiglu")


def inputs(m: int, k: int, n: int, dtype, device, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * 0.5).to(device, dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(device, dtype)
    return x, w, g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_plain_and_residual(device, dtype, m, k, n):
    x, w, g = inputs(m, k, n, dtype, device, seed=m * k + n)
    assert_same_rounding(gemv(x, w, block_k=64), gemv_ref(x, w), f"gemv {m}x{k}x{n} {dtype}")
    r = torch.randn(m, n, generator=g).to(device, dtype)
    assert_same_rounding(gemv(x, w, residual=r, block_k=64), gemv_ref(x, w, residual=r),
                         f"gemv + residual {m}x{k}x{n} {dtype}")


@pytest.mark.parametrize("late_sum,stages", [(True, 1), (True, 3), (False, 2)])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_launch_configurations_give_the_same_results(device, late_sum, stages, m, k, n):
    x, w, g = inputs(m, k, 2 * n, torch.bfloat16, device, seed=3 * m + n)
    cfg = dict(block_k=64, late_sum=late_sum, stages=stages, block_n=16, num_warps=2)
    r = torch.randn(m, 2 * n, generator=g).to(device, torch.bfloat16)
    assert_epilogues(x, w, r, f"gemv {cfg}", **cfg)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_swiglu_epilogue(device, dtype, m, k, n):
    x, w_gate_up, _ = inputs(m, k, 2 * n, dtype, device, seed=7 * m + k)
    got = gemv(x, w_gate_up, silu_mul=True, block_k=64)
    assert got.shape == (m, n)
    assert_same_rounding(got, gemv_ref(x, w_gate_up, silu_mul=True), f"gemv swiglu {m}x{k}x{n} {dtype}")


def test_strided_rows_and_errors(device):
    x_wide, w, _ = inputs(2, 256, 48, torch.float32, device, seed=1)
    x = x_wide[:, :128]  # rows 256 apart
    assert_same_rounding(gemv(x, w[:, :128].contiguous()), gemv_ref(x, w[:, :128]), "strided x")
    with pytest.raises(ValueError, match="at most"):
        gemv(torch.zeros(17, 8, device=device), torch.zeros(4, 8, device=device))
    with pytest.raises(ValueError, match="do not combine"):
        gemv(x, w[:, :128].contiguous(), residual=torch.zeros(2, 48, device=device), silu_mul=True)


def test_every_launch_configuration_the_runners_use_is_correct(device):
    """The launch tables (runtime/cp_launch.py, runtime/talker_launch.py) at 1 and 2 rows, every fusion each product
    takes there, PDL off (the interpreter has none; tests/gpu compares the PDL launches with these)."""
    from tts_engine.runtime.cp_launch import GEMV_LAUNCH, PDL_LAUNCH
    from tts_engine.runtime.talker_launch import TALKER_GEMV_LAUNCH, TALKER_PDL_LAUNCH

    tables = {"cp": GEMV_LAUNCH, "cp_pdl": PDL_LAUNCH, "talker": TALKER_GEMV_LAUNCH, "talker_pdl": TALKER_PDL_LAUNCH}
    for m in (1, 2):
        x, w, g = inputs(m, 96, 64, torch.bfloat16, device, seed=5 + m)
        ln = (1 + 0.2 * torch.randn(96, generator=g)).to(device, torch.bfloat16)
        r = torch.randn(m, 64, generator=g).to(device, torch.bfloat16)
        for table, launch in tables.items():
            for name, cfg in launch.items():
                cfg = {**cfg, "pdl": False, "block_n": min(cfg.get("block_n", 8), 8)}
                fused = dict(residual=r) if name in ("o", "down") else dict(silu_mul=True) if name == "gate_up" \
                    else dict(norm=(ln, 1e-6))
                early = {"residual_early": True} if cfg.pop("residual_early", False) else {}
                got = gemv(x, w, **fused, **early, **cfg)
                assert_same_rounding(got, gemv_ref(x, w, **fused), f"{table} {name} at {m} rows")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_norm_prologue(device, dtype, m, k, n):
    """The RMSNorm before the product, in every epilogue; K in several slices and in one."""
    x, w, g = inputs(m, k, 2 * n, dtype, device, seed=11 * m + k)
    x = x * 3 + 1  # a row mean far from zero: the norm must use the whole row's sum of squares
    ln = (1 + 0.2 * torch.randn(k, generator=g)).to(device, dtype)
    r = torch.randn(m, 2 * n, generator=g).to(device, dtype)
    for block_k in (64, next_pow2(k)):
        assert_epilogues(x, w, r, f"norm gemv {m}x{k}x{n} {dtype} {block_k}", norm=(ln, 1e-6), block_k=block_k)
    with pytest.raises(ValueError, match="norm weight"):
        gemv(x, w, norm=(ln[:-1], 1e-6))


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_whole_rows_kernel(device, m, k, n):
    """The whole-row kernel (the one launched with PDL on the GPU; PDL itself needs an sm90 GPU)."""
    x, w, g = inputs(m, k, 2 * n, torch.bfloat16, device, seed=13 * m + n)
    ln = (1 + 0.2 * torch.randn(k, generator=g)).to(device, torch.bfloat16)
    r = torch.randn(m, 2 * n, generator=g).to(device, torch.bfloat16)
    for norm in (None, (ln, 1e-6)):
        assert_epilogues(x, w, r, f"whole rows {m}x{k}x{n} norm={norm is not None}", whole_rows=True, block_n=8,
                         norm=norm)
        # the residual read before the (PDL) wait: the same sums
        assert_same_rounding(gemv(x, w, residual=r, norm=norm, whole_rows=True, block_n=8, residual_early=True),
                             gemv_ref(x, w, residual=r, norm=norm), f"whole rows {m}x{k}x{n} residual read early")
    with pytest.raises(ValueError, match="residual_early"):
        gemv(x, w, whole_rows=True, residual_early=True)


@pytest.mark.parametrize("chunks", [2, 3])
@pytest.mark.parametrize("m,k,n", [(1, 96, 24), (3, 200, 40), (2, 192, 16)])
def test_whole_rows_in_slices(device, chunks, m, k, n):
    """`row_chunks`: a row held as 2-3 power-of-two slices (96 as 3 x 32 or 2 x 64; 200 as 2 or 3 slices of 128:
    the second partly masked, a third wholly), every prologue and epilogue, the residual read early or not."""
    x, w, g = inputs(m, k, 2 * n, torch.bfloat16, device, seed=19 * m + k + chunks)
    x = x * 2 + 0.5  # the norm's sum of squares must take every slice
    ln = (1 + 0.2 * torch.randn(k, generator=g)).to(device, torch.bfloat16)
    r = torch.randn(m, 2 * n, generator=g).to(device, torch.bfloat16)
    for norm in (None, (ln, 1e-6)):
        cfg = dict(whole_rows=True, block_n=4, norm=norm, row_chunks=chunks)
        assert_epilogues(x, w, r, f"whole rows in {chunks} slices {m}x{k}x{n} norm={norm is not None}", **cfg)
        assert_same_rounding(gemv(x, w, residual=r, residual_early=True, **cfg), gemv_ref(x, w, residual=r, norm=norm),
                             f"{chunks} slices, residual read early")
    with pytest.raises(ValueError, match="row_chunks"):
        gemv(x, w, row_chunks=2)


@pytest.mark.parametrize("blocks,block_n,chunks", [(2, 4, 1), (3, 1, 1), (5, 2, 3), (2, 2, 2)])
@pytest.mark.parametrize("m,k,n", [(1, 96, 24), (3, 200, 40), (2, 64, 13)])
def test_whole_rows_streamed_in_blocks(device, blocks, block_n, chunks, m, k, n):
    """`row_blocks`: a program's blocks of whole rows in turn, the next one's weights (and residual) loaded before the
    last one's products are summed; programs whose last blocks lie past N (n 13, 24, 40 in blocks of 1-4 rows,
    2-5 a program), rows in one to three slices, every prologue and epilogue, the residual read early or not."""
    x, w, g = inputs(m, k, 2 * n, torch.bfloat16, device, seed=23 * m + k + blocks)
    x = x * 2 + 0.5  # the norm's sum of squares must take every slice
    ln = (1 + 0.2 * torch.randn(k, generator=g)).to(device, torch.bfloat16)
    r = torch.randn(m, 2 * n, generator=g).to(device, torch.bfloat16)
    for norm in (None, (ln, 1e-6)):
        cfg = dict(whole_rows=True, block_n=block_n, norm=norm, row_blocks=blocks, row_chunks=chunks)
        assert_epilogues(x, w, r, f"{blocks} blocks of {block_n} rows in {chunks} slices {m}x{k}x{n} "
                                  f"norm={norm is not None}", **cfg)
        assert_same_rounding(gemv(x, w, residual=r, residual_early=True, **cfg), gemv_ref(x, w, residual=r, norm=norm),
                             f"{blocks} blocks of {block_n} rows, residual read early")
    # bit for bit the unstreamed kernel with the same slices, and on strided views of x, w and the residual
    # (rows padded past K, and past 2n)
    xw = torch.cat([torch.randn(m, 5, generator=g).to(device, x.dtype), x, x[:, :3]], dim=1)
    ww = torch.cat([w, w[:, :7]], dim=1)
    rw = torch.cat([r, r[:, :4]], dim=1)
    xs, ws, rs = xw[:, 5:5 + k], ww[:, :k], rw[:, :2 * n]
    assert xs.stride(0) != k and ws.stride(0) != k and rs.stride(0) != 2 * n
    for fused in (dict(silu_mul=True), dict(residual=rs, residual_early=True)):  # every load a stride takes
        cfg = dict(whole_rows=True, block_n=block_n, norm=(ln, 1e-6), row_chunks=chunks, **fused)
        streamed, unstreamed = gemv(xs, ws, row_blocks=blocks, **cfg), gemv(xs, ws, **cfg)
        if device.type == "cpu":  # the interpreter runs one summation order for both
            assert torch.equal(streamed, unstreamed), f"streamed != unstreamed {list(fused)}"
        else:  # compiled, a loop's reductions need not be scheduled as straight-line code's
            assert_same_rounding(streamed, unstreamed, f"streamed against unstreamed, {list(fused)}")
        ref = gemv_ref(xs, ws, norm=(ln, 1e-6), **{k_: v for k_, v in fused.items() if k_ != "residual_early"})
        assert_same_rounding(streamed, ref, f"streamed, strided views, {list(fused)}")
    for bad in (dict(row_blocks=2), dict(row_blocks=0, whole_rows=True), dict(row_blocks=65, whole_rows=True)):
        with pytest.raises(ValueError, match="row_blocks"):
            gemv(x, w, **bad)
