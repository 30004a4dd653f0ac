"""Products on the tensor cores for the code predictor's passes (kernels/cuda/cp_gemv.cu).

    products = CpGemv(device)                    at load: nothing built yet (a cubin a product shape, at first use)
    products.takes(x, w, ...)                    -> can the kernel compute this `gemv` call
    products(x, w, norm=, residual=, silu_mul=, x_delta=, residual_delta=, partials=, pdl=, residual_early=)
                                                 -> y [M, N] (or fp32 split-K partials [S, M, N])

For one row of x (`cp_gemv`: the batch-1 passes) it computes what kernels/gemv.py's `gemv` computes, with the same
fusions and the same rounding (the fp32 sums in the tensor core's order: a few outputs may differ by one bf16 ulp),
launched with programmatic dependent launch like the whole-row Triton kernel it stands in for (its weights, and with
residual_early its residual, read before the wait). Why: see the .cu file; in short, after the wait a warp does ~16
MMAs where the Triton kernel's threads convert, multiply and reduce every weight: the batch-1 code-predictor
frame 1.368 -> 1.145 ms. For 2-64 rows (`cp_gemm_rows`: the passes of batches 2-64) it computes the plain product
(or its split-K partials) or gate/up with SwiGLU, x's rows as the B operand's columns, with the RMSNorm of x before
(qkv, gate/up, the heads) or a residual added after (o, down; in slices of K, a thread block cluster a column of w
whose first CTA adds them up). The runner's rows passes take the plain product, the split-K partials and gate/up
with SwiGLU; the norm and residual forms are tested here but not used by the runner (their norms inside the
products are slower than the norm launches at 8 and 32 rows).

Where it cannot run (no sm90 GPU or nvcc) the runner keeps the Triton GEMVs (`unsupported`); a call it does not take
(`takes`) goes to `gemv`.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from . import cuda_build
from .gemv import gemv

SOURCE = Path(__file__).with_name("cuda") / "cp_gemv.cu"
KW = 256  # columns a warp (cp_gemv.cu CG_KW): 64 registers of weights a lane


class _Params(ctypes.Structure):  # kernels/cuda/cp_gemv.cu CpGemvParams
    _fields_ = [("x", ctypes.c_void_p), ("w", ctypes.c_void_p), ("ln", ctypes.c_void_p), ("residual", ctypes.c_void_p),
                ("delta", ctypes.c_void_p), ("y", ctypes.c_void_p), ("n_out", ctypes.c_int), ("eps", ctypes.c_float),
                ("early", ctypes.c_int), ("residual_early", ctypes.c_int), ("m", ctypes.c_int),
                ("x_stride", ctypes.c_longlong), ("y_stride", ctypes.c_longlong), ("r_stride", ctypes.c_longlong)]


def unsupported(device: torch.device) -> str | None:
    """Why the kernel cannot run on `device` here (None: it can)."""
    return cuda_build.unsupported(device, "cp_gemv")


MAX_ROWS = 64  # rows of x `cp_gemm_rows` takes (8 tiles of 8)
ROWS_KW = 256  # `cp_gemm_rows`: columns a warp
ROWS_CTA_K = 1024  # `cp_gemm_rows`: columns a CTA, where the call takes split-K partials (K / ROWS_CTA_K slices)


def compile_cp_gemv(k: int, mode: int, norm: bool, delta: bool, kw: int = KW, macros: tuple[str, ...] = (),
                    tiles: int = 0, splits: int = 1, blocks: int = 1) -> bytes:
    """`cp_gemv` (tiles 0), else `cp_gemm_rows` over `tiles` tiles of 8 rows, `splits` slices of K and `blocks` blocks
    of 16 rows of w a CTA."""
    rows = ["-DCG_ROWS=1", f"-DCG_NT={tiles}", f"-DCG_SPLIT={splits}", f"-DCG_RB={blocks}"] if tiles else []
    return cuda_build.compile_cubin(SOURCE, [f"-DCG_K={k}", f"-DCG_KW={kw}", f"-DCG_MODE={mode}",
                                             f"-DCG_NORM={int(norm)}", f"-DCG_DELTA={int(delta)}", *rows,
                                             *(f"-D{m}" for m in macros)], "cp_gemv")


SHARED_BYTES = 227 * 1024  # an sm90 CTA's shared memory at most


def rows_shared(k: int, tiles: int, splits: int, kw: int, blocks: int, norm: bool = False) -> int:
    """`cp_gemm_rows`' dynamic shared memory (bytes): its CTA's columns of x for 8 `tiles` rows (bf16), its warps'
    sums (cp_gemv.cu `partial`, fp32), and with the norm its weights (bf16) and the rows' sums of squares by warp
    column (fp32)."""
    cta_k = k // splits
    extra = cta_k * 2 + cta_k // kw * 8 * tiles * 4 if norm else 0
    return cta_k * 8 * tiles * 2 + cta_k // kw * blocks * 16 * (8 * tiles + 1) * 4 + extra


def rows_fit(k: int, tiles: int, splits: int, kw: int, blocks: int = 1, norm: bool = False) -> bool:
    """Does a `cp_gemm_rows` CTA's shared memory fit an sm90 SM's."""
    return rows_shared(k, tiles, splits, kw, blocks, norm) <= SHARED_BYTES


MAX_ROWS_WARPS = 16  # `cp_gemm_rows`: warps a CTA at most (~120 registers a thread: a CTA an SM)
# `cp_gemm_rows`: blocks of 16 rows of w a CTA by tiles of x (1-8; the last past its end), where they fit.
# Code-predictor frame at batch 8 / 16 / 32 with (1, 1, 1, 1) 1.585 / 2.111 / 2.804 ms, (1, 1, 2, 2)
# 1.586 / 2.085 / 2.448, these 1.569 / 1.885 / 2.285.
ROWS_BLOCKS = (1, 2, 4, 4)
ROWS_MIN_CTAS = 0  # `cp_gemm_rows`: fewer blocks a CTA where more would leave fewer CTAs than this


def row_splits(k: int, rows: int, partials: bool, cta_k: int) -> int:
    """Slices of K a `cp_gemm_rows` call of `rows` rows cuts its product into: K / cta_k where it takes split-K
    partials (more than one row) and cta_k divides K, else 1."""
    return k // cta_k if partials and rows > 1 and k % cta_k == 0 else 1


def row_blocks(w_rows: int, k: int, tiles: int, splits: int, kw: int, wanted: tuple[int, ...], min_ctas: int,
               norm: bool = False) -> int:
    """Blocks of 16 rows of w [w_rows, k] a `cp_gemm_rows` CTA: `wanted` at these tiles (its last past its end), halved
    until they divide w's blocks, the CTA's warps (MAX_ROWS_WARPS) and shared memory fit, and the CTAs are at least
    `min_ctas`."""
    blocks = wanted[min(tiles, len(wanted)) - 1]
    warps_k = k // splits // kw
    while blocks > 1 and (w_rows // 16 % blocks or warps_k * blocks > MAX_ROWS_WARPS
                          or not rows_fit(k, tiles, splits, kw, blocks, norm)
                          or w_rows // 16 // blocks * splits < min_ctas):
        blocks //= 2
    return blocks


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0


class CpGemv:
    """The products on `device` (an sm90 GPU), a kernel a (K, mode, norm, delta, tiles, splits, blocks) built at its
    first call; `kw`: columns a warp of `cp_gemv`, `rows_kw` of `cp_gemm_rows`, `rows_cta_k`: its columns a CTA where a
    call takes partials or adds a residual, `rows_blocks` and `rows_min_ctas`: its blocks of w a CTA (`blocks`);
    `macros`: cp_gemv.cu's. A rows call with a residual in slices of K launches each column of w's CTAs as a
    thread block cluster (the first adds the others' sums, read from their shared memory)."""

    def __init__(self, device: torch.device, kw: int = KW, macros: tuple[str, ...] = (), rows_kw: int = ROWS_KW,
                 rows_cta_k: int = ROWS_CTA_K, rows_blocks: tuple[int, ...] = ROWS_BLOCKS,
                 rows_min_ctas: int = ROWS_MIN_CTAS):
        why = unsupported(device)
        if why:
            raise RuntimeError(f"cp_gemv: {why}")
        if device.index is None:  # "cuda": the current device, named, so that tensors' devices compare equal to it
            device = torch.device("cuda", torch.cuda.current_device())
        self.device, self.kw, self.macros = device, kw, macros
        self.rows_kw, self.rows_cta_k, self.rows_blocks, self.rows_min_ctas = rows_kw, rows_cta_k, rows_blocks, \
            rows_min_ctas
        self.kernels: dict[tuple, cuda_build.CudaKernel] = {}
        self.launches = 0  # products launched (captured launches count once)

    def kernel(self, k: int, mode: int, norm: bool, delta: bool, tiles: int = 0, splits: int = 1,
               blocks: int = 1) -> cuda_build.CudaKernel:
        """One row (tiles 0: `cp_gemv`) or up to 8 x `tiles` rows in `splits` slices of K, `blocks` blocks of w a CTA
        (`cp_gemm_rows`)."""
        key = (k, mode, norm, delta, tiles, splits, blocks)
        if key not in self.kernels:
            kw = self.rows_kw if tiles else self.kw
            cubin = compile_cp_gemv(k, mode, norm, delta, kw, self.macros, tiles, splits, blocks)
            shared = rows_shared(k, tiles, splits, kw, blocks, norm) if tiles else 0
            self.kernels[key] = cuda_build.CudaKernel(cubin, "cp_gemm_rows" if tiles else "cp_gemv", self.device,
                                                      shared=shared)
        return self.kernels[key]

    def blocks(self, tiles: int, w: torch.Tensor, splits: int, norm: bool = False) -> int:
        """Blocks of 16 rows of w a `cp_gemm_rows` CTA (`row_blocks` with `rows_blocks` and `rows_min_ctas`)."""
        return row_blocks(w.shape[0], w.shape[1], tiles, splits, self.rows_kw, self.rows_blocks, self.rows_min_ctas,
                          norm)

    def splits(self, x: torch.Tensor, w: torch.Tensor, partials: bool) -> int:
        """Slices of K of a call (`row_splits` with `rows_cta_k`); partials: the call takes partials or adds a
        residual."""
        return row_splits(w.shape[1], x.shape[0], partials, self.rows_cta_k)

    def takes(self, x: torch.Tensor, w: torch.Tensor, *, residual: torch.Tensor | None = None,
              silu_mul: bool = False, norm: tuple[torch.Tensor, float] | None = None,
              x_delta: torch.Tensor | None = None, residual_delta: torch.Tensor | None = None,
              partials: bool = False, **_) -> bool:
        """Does the kernel compute `gemv(x, w, ...)`: bf16 rows of x on this device, K a multiple of `kw` (one row)
        or of `rows_kw` a slice (more; at most 32 warps either way), w [N, K] contiguous with N a multiple of 16 (of 8
        output features with silu_mul), everything read 16-byte aligned; one row with any of the fusions, or
        2 .. MAX_ROWS rows with the norm, SwiGLU or a residual [M, N] (`cp_gemm_rows`; the norm on x's whole rows, not
        with partials). partials: see `__call__`."""
        if x.dim() != 2 or not 1 <= x.shape[0] <= MAX_ROWS or x.dtype != torch.bfloat16 or x.device != self.device:
            return False
        m, k = x.shape
        if m > 1 and (x_delta is not None or residual_delta is not None or x.stride(0) % 8
                      or (norm is not None and partials)):
            return False
        kw, cta_k = (self.kw, k) if m == 1 else (self.rows_kw, k // self.splits(x, w, partials or residual is not None))
        if m > 1 and not rows_fit(k, -(-m // 8), k // cta_k, kw, norm=norm is not None):
            return False
        if cta_k % kw or cta_k // kw > 32 or w.dtype != x.dtype or w.dim() != 2 or w.shape[1] != k \
                or not w.is_contiguous() or x.stride(1) != 1 or not (_aligned(x) and _aligned(w)):
            return False
        if w.shape[0] % 16 or (residual is not None and silu_mul):
            return False
        if norm is not None and (norm[0].shape != (k,) or norm[0].dtype != x.dtype or not norm[0].is_contiguous()
                                 or not _aligned(norm[0]) or residual is not None):
            return False
        n_out = w.shape[0] // 2 if silu_mul else w.shape[0]
        if residual is not None and (residual.shape != (m, n_out) or residual.dtype != x.dtype
                                     or residual.stride(1) != 1 or residual.device != x.device):
            return False
        for d, width in ((x_delta, k), (residual_delta, n_out)):
            if d is not None and (d.dtype != torch.int64 or d.dim() != 2 or d.shape[1] != width or d.stride(1) != 1
                                  or not _aligned(d)):
                return False
        return (residual_delta is None or residual is not None) and (x_delta is None or residual is None)

    def __call__(self, x: torch.Tensor, w: torch.Tensor, *, residual: torch.Tensor | None = None,
                 silu_mul: bool = False, norm: tuple[torch.Tensor, float] | None = None,
                 x_delta: torch.Tensor | None = None, residual_delta: torch.Tensor | None = None,
                 partials: bool = False, pdl: bool | int = False, residual_early: bool = False,
                 **launch) -> torch.Tensor:
        """`gemv(x, w, ...)` where the kernel takes it (`takes`), else `gemv` itself with `launch` (its Triton launch
        keywords, which this kernel does not need). partials: a plain product of 2 or more rows may come as fp32
        split-K partials [S, M, N] (`splits`; kernels/rms_norm.py's `add_rms_norm` sums them), else it is [M, N] in
        x's dtype. pdl: launched with programmatic dependent launch, 2 (`backend.PDL_EARLY`): the next launch may start
        before this one's wait; residual_early: the residual (and residual_delta) read before the wait, right where
        they were written two launches back or more (one row)."""
        kw = dict(residual=residual, silu_mul=silu_mul, norm=norm, x_delta=x_delta, residual_delta=residual_delta)
        if not self.takes(x, w, **kw, partials=partials):
            return gemv(x, w, **kw, pdl=pdl, residual_early=residual_early, **launch)
        (m, k), tiles = x.shape, 0 if x.shape[0] == 1 else -(-x.shape[0] // 8)
        mode = 2 if silu_mul else 1 if residual is not None else 0
        n_out = w.shape[0] // 2 if silu_mul else w.shape[0]
        splits = self.splits(x, w, (partials or residual is not None) and not silu_mul) if tiles else 1
        delta = x_delta if x_delta is not None else residual_delta
        if splits > 1 and mode == 0:
            y = torch.empty(splits, m, n_out, device=x.device, dtype=torch.float32)
        else:
            y = torch.empty(m, n_out, device=x.device, dtype=x.dtype)
        blocks = self.blocks(tiles, w, splits, norm is not None) if tiles else 1
        ln, eps = norm if norm is not None else (None, 0.0)
        p = _Params(x.data_ptr(), w.data_ptr(), None if ln is None else ln.data_ptr(),
                    None if residual is None else residual.data_ptr(), None if delta is None else delta.data_ptr(),
                    y.data_ptr(), n_out, eps, int(pdl == 2), int(residual_early), m, x.stride(0), y.stride(-2),
                    0 if residual is None else residual.stride(0))
        kernel = self.kernel(k, mode, norm is not None, delta is not None, tiles, splits, blocks)
        warps = k // self.kw if not tiles else k // splits // self.rows_kw * blocks
        kernel.launch((w.shape[0] // 16 // blocks, splits), warps * 32, p, bool(pdl),
                      cluster=(1, splits) if mode == 1 and splits > 1 else None)
        self.launches += 1
        return y
