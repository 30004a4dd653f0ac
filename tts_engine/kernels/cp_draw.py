"""The code predictor's draws (codebooks 1-15) as a CUDA kernel (kernels/cuda/cp_draw.cu): one CTA a row.

    CpDrawKernel(vocab, device)                      at load: compiles (cached) and loads the kernel
    kernel.draw(logits, out, **settings, codebook, gather, gather2, pdl)   -> ids written to out [B]

It computes what `sample_rows` (kernels/sample.py) computes for a row without codebook 0's processors: the same kept
set (temperature, exact top-k, top-p), the same counter uniform, the inverse CDF in id order (an fp32 CDF summed in
another order: a pick can differ only where the uniform falls within rounding of a CDF boundary), the argmax for greedy
rows; and the picked id's rows of one or two tables gathered into the next pass's inputs. Why CUDA C++: its block-wide
sums are single-instruction warp reductions and one barrier each (`redux.sync`), where Triton's are a tree of shuffles
and two shared-memory round trips; the draw is ~20 such sums, 15 times a frame on the critical path.

Where it cannot run (no sm90 GPU or nvcc, logits not bf16, a row wider than the compiled vocabulary), the runner keeps
`sample_rows` (`unsupported`, `CpDrawKernel.takes`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from . import cuda_build

SOURCE = Path(__file__).with_name("cuda") / "cp_draw.cu"
THREADS = 256  # a row's CTA (8 ids a thread at 2,048 codes)


class _Params(ctypes.Structure):  # kernels/cuda/cp_draw.cu CpDrawParams
    _fields_ = [("logits", ctypes.c_void_p), ("logits_stride", ctypes.c_longlong),
                ("do_sample", ctypes.c_void_p), ("temperature", ctypes.c_void_p), ("top_k", ctypes.c_void_p),
                ("top_p", ctypes.c_void_p), ("seed", ctypes.c_void_p), ("frame", ctypes.c_void_p),
                ("out", ctypes.c_void_p), ("out_stride", ctypes.c_longlong),
                ("table", ctypes.c_void_p), ("x", ctypes.c_void_p), ("x_stride", ctypes.c_longlong),
                ("table2", ctypes.c_void_p), ("x2", ctypes.c_void_p), ("x2_stride", ctypes.c_longlong),
                ("dim", ctypes.c_int), ("dim2", ctypes.c_int), ("codebook", ctypes.c_int), ("early", ctypes.c_int)]


def shape_problems(vocab: int, threads: int = THREADS) -> list[str]:
    """What the kernel's layout does not hold (its static_asserts, said before nvcc says them)."""
    per = vocab // threads
    if per * threads != vocab or per % 8 or per > 32:
        return [f"{vocab} codes over {threads} threads (a multiple of 8 a thread, at most 32)"]
    return []


def unsupported(device: torch.device, vocab: int) -> str | None:
    """Why the kernel cannot draw rows of `vocab` codes on `device` here (None: it can)."""
    why = cuda_build.unsupported(device, "cp_draw")
    if why is None and shape_problems(vocab):
        return "shapes: " + "; ".join(shape_problems(vocab))
    return why


def compile_cp_draw(vocab: int, macros: tuple[str, ...] = ()) -> bytes:
    return cuda_build.compile_cubin(SOURCE, [f"-DCD_V={vocab}", f"-DCD_THREADS={THREADS}",
                                             *(f"-D{m}" for m in macros)], "cp_draw")


_SETTINGS = {"do_sample": torch.bool, "temperature": torch.float32, "top_k": torch.int64, "top_p": torch.float32,
             "seed": torch.int64, "frame": torch.int64}


class CpDrawKernel:
    """The draw for rows of `vocab` codes on `device` (an sm90 GPU); `macros`: cp_draw.cu's (e.g. "CD_PASSES=3")."""

    def __init__(self, vocab: int, device: torch.device, macros: tuple[str, ...] = ()):
        why = unsupported(device, vocab)
        if why:
            raise RuntimeError(f"cp_draw: {why}")
        if device.index is None:  # "cuda": the current device, named, so that tensors' devices compare equal to it
            device = torch.device("cuda", torch.cuda.current_device())
        self.vocab, self.device, self.macros = vocab, device, macros
        self.kernel = cuda_build.CudaKernel(compile_cp_draw(vocab, macros), "cp_draw", device)
        self.launches = 0  # draws launched (captured launches count once)

    def takes(self, logits: torch.Tensor) -> bool:
        """Does this kernel draw from these logits (bf16 rows of its vocabulary, contiguous, on its device)?"""
        return logits.dtype == torch.bfloat16 and logits.dim() == 2 and logits.shape[1] == self.vocab \
            and logits.stride(1) == 1 and logits.device == self.device

    def draw(self, logits: torch.Tensor, out: torch.Tensor, *, do_sample: torch.Tensor, temperature: torch.Tensor,
             top_k: torch.Tensor, top_p: torch.Tensor, seed: torch.Tensor, frame: torch.Tensor, codebook: int,
             gather: tuple[torch.Tensor, torch.Tensor] | None = None,
             gather2: tuple[torch.Tensor, torch.Tensor] | None = None, pdl: bool | int = False) -> None:
        """`sample_rows`' arguments (no codebook 0, no prefetch): logits [B, V] bf16 with contiguous rows; settings [B]
        (do_sample bool, temperature / top_p f32, top_k / seed / frame i64); out: i64 [B] view (any stride); gather /
        gather2: (table [V, W] contiguous bf16, out [B, W] view with contiguous rows, 16-byte aligned), out[b] =
        table[id[b]]. pdl: launched with programmatic dependent launch; 2 (`backend.PDL_EARLY`): the next launch may
        start before this one's wait."""
        if not self.takes(logits):
            raise ValueError(f"cp_draw takes bf16 logits [B, {self.vocab}] with contiguous rows on {self.device}, got "
                             f"{logits.dtype} {tuple(logits.shape)}")
        b = logits.shape[0]
        settings = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, frame=frame)
        for name, t in settings.items():
            if t.dtype != _SETTINGS[name] or t.dim() != 1 or t.shape[0] < b or t.stride(0) != 1 \
                    or t.device != self.device:
                raise ValueError(f"cp_draw: {name} must be a contiguous {_SETTINGS[name]} [>= {b}] on {self.device}, "
                                 f"got {t.dtype} {tuple(t.shape)}")
        if out.dtype != torch.int64 or out.dim() != 1 or out.shape[0] != b or out.device != self.device:
            raise ValueError(f"cp_draw: out must be int64 [{b}] on {self.device}, got {out.dtype} {tuple(out.shape)}")
        tables = []
        for name, pair in (("gather", gather), ("gather2", gather2)):
            if pair is None:
                tables.append((None, None, 0, 0))
                continue
            table, x = pair
            ok = (table.dtype == x.dtype == torch.bfloat16 and table.is_contiguous() and table.dim() == 2
                  and table.shape[0] == self.vocab and table.shape[1] % 8 == 0 and x.dim() == 2
                  and tuple(x.shape) == (b, table.shape[1]) and x.stride(1) == 1 and x.stride(0) % 8 == 0
                  and table.data_ptr() % 16 == 0 and x.data_ptr() % 16 == 0)
            if not ok:
                raise ValueError(f"cp_draw: {name} takes a contiguous bf16 table [{self.vocab}, W] (W a multiple of 8) "
                                 f"and an out view [B, W] with contiguous 16-byte aligned rows, got "
                                 f"{tuple(table.shape)} / {tuple(x.shape)}")
            tables.append((table.data_ptr(), x.data_ptr(), x.stride(0), table.shape[1]))
        (t1, x1, s1, d1), (t2, x2, s2, d2) = tables
        p = _Params(logits.data_ptr(), logits.stride(0), do_sample.data_ptr(), temperature.data_ptr(),
                    top_k.data_ptr(), top_p.data_ptr(), seed.data_ptr(), frame.data_ptr(), out.data_ptr(),
                    out.stride(0), t1, x1, s1, t2, x2, s2, d1, d2, codebook, int(pdl == 2))
        self.kernel.launch(b, THREADS, p, bool(pdl))
        self.launches += 1
