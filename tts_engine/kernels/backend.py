"""What the Triton kernels of this package share: whether Triton is there, and how they run on CPU.

On CUDA tensors the kernels are compiled. On CPU tensors they run through Triton's interpreter,
which needs `TRITON_INTERPRET=1` in the environment before `triton` is first imported (Triton
decides compiled or interpreted when each `@triton.jit` function is defined); the CPU test
session sets it in `tests/conftest.py`. Without Triton every wrapper falls back to its torch
reference.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU installs without triton: callers use the torch references
    triton = None

HAVE_TRITON = triton is not None

try:  # grid dependency control (programmatic dependent launch), sm90+; Triton >= 3.3
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:
    gdc_wait = gdc_launch_dependents = None


def runs_on(device: torch.device) -> bool:
    """Can the kernels run on tensors of `device` in this process?"""
    if not HAVE_TRITON:
        return False
    if device.type == "cuda":
        return True
    from triton.runtime.interpreter import InterpretedFunction

    return device.type == "cpu" and isinstance(tl.sum, InterpretedFunction)


def pdl_supported(device: torch.device) -> bool:
    """Can kernels on `device` be launched with programmatic dependent launch (`launch_pdl`): the
    next kernel's programs start while this one finishes, and wait (`gdc_wait`) only before they
    read what it wrote? Compiled Triton on an sm90+ GPU only."""
    return (HAVE_TRITON and gdc_wait is not None and device.type == "cuda"
            and torch.cuda.get_device_capability(device)[0] >= 9)


def pdl_launch(pdl: bool | int) -> dict:
    """Launch keywords of a kernel that takes programmatic dependent launch (with `PDL=pdl` for its
    `pdl_start`)."""
    return {"launch_pdl": True} if pdl else {}


# A kernel's `PDL` (and its wrapper's `pdl`) may also be PDL_EARLY: it lets the next kernel's programs start before
# its own wait rather than after it (`pdl_start`), so that two launches ahead load their weights while the one before
# them finishes. What that allows the next kernel: a launch whose programs start before a wait may read before its
# own wait only what was written before the last kernel ahead of it that triggers after its wait (there, the one
# before that had finished). The code predictor's passes (`CodePredictorRunner.early_trigger`) say which of theirs
# may.
PDL_EARLY = 2


# A sum across programs that must not depend on the order they finish in is kept as int64 multiples of 2^-32
# (kernels/cp_attention_o.py): integer atomic adds commute, fp32 ones do not round the same in every order.
FIXED_ONE = 2.0 ** 32


def from_fixed_ref(q: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int64 multiples of 2^-32 -> values of `dtype`, as the kernels' `from_fixed` rounds them (to fp32, then
    dtype)."""
    return (q.to(torch.float32) * (1.0 / FIXED_ONE)).to(dtype)


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


if HAVE_TRITON:

    @triton.jit
    def pdl_start(PDL: tl.constexpr):
        """In a kernel launched with PDL, before it reads anything the previous kernel wrote: wait
        until those writes are visible, then let the next kernel's programs start (they wait in turn).
        PDL_EARLY (2): let them start first, then wait."""
        if PDL == 2:
            gdc_launch_dependents()
            gdc_wait()
        elif PDL:
            gdc_wait()
            gdc_launch_dependents()

    @triton.jit
    def round_to(x, dtype: tl.constexpr):
        """fp32 x rounded to the precision of `dtype`, kept in fp32: round to nearest even, as torch rounds.

        Done on the bits for bf16 because Triton's interpreter truncates when it casts fp32 to
        bf16 (the GPU rounds to nearest even); on the GPU this costs three integer ops."""
        if dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
            y = bits.to(tl.float32, bitcast=True)
        elif dtype == tl.float16:
            y = x.to(tl.float16).to(tl.float32)
        else:
            y = x
        return y

    @triton.jit
    def to_fixed(x):
        """fp32 x -> int64 multiples of 2^-32 (truncated: exact for |x| >= 2^-8), for an order-free atomic sum."""
        return (x * 4294967296.0).to(tl.int64)

    @triton.jit
    def from_fixed(q, dtype: tl.constexpr):
        """int64 multiples of 2^-32 -> fp32 holding the value rounded to `dtype` (to fp32 first, as
        `from_fixed_ref`)."""
        return round_to(q.to(tl.float32) * 2.3283064365386963e-10, dtype)
