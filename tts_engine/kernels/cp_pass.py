"""The code predictor's batch-1 pass as one persistent CUDA kernel (kernels/cuda/cp_pass.cu), and how it is built,
loaded and launched.

    CpPassKernel(stack, heads, k_cache, v_cache, cos, sin)    at load: compiles (cached) and loads the kernel
    kernel.launch(pos, x_in, qkv0, codebook)  -> logits [1, V]  one pass at position pos (passes 1-14 of a frame)

Why CUDA C++ and not Triton: the pass's 20 steps run in one launch, each CTA polling the step before's outputs, which
travel as tagged 8-byte words (value and step: no barrier or fence between steps), while each CTA's slice of the
weights streams ahead of the products (into registers a step ahead, or by the bulk-copy engine into shared memory:
the kernel's CP_REG_WEIGHTS). Triton exposes neither the bulk copies with their barriers nor a way to keep a weight
stream running across waits (run 16's Triton persistent chain with a grid barrier lost to PDL launches, and so did
this kernel with one: 1.70 ms a frame against 1.39, run 28). Built with CP_TRACE, `trace_phases` says where each
step's time goes (run 29).

The kernel is compiled for sm_90a by nvcc at first use, with the model's shapes as macros, and launched with
programmatic dependent launch (kernels/cuda_build.py: cached cubins, the CUDA driver through ctypes, captured in the
runner's CUDA graphs like any kernel). Where there is no nvcc, no sm90 GPU or other shapes, `unsupported` says why and
the runner keeps its Triton passes.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from . import cuda_build
from .cp_attention import LOG2E
from .cuda_build import CudaKernel

SOURCE = Path(__file__).with_name("cuda") / "cp_pass.cu"
ALIGN = 128  # a weight slot's bytes are a multiple of this (the bulk copies want 16)
# The macros the runner builds its kernel with (`cp_persistent`): the weights in registers, loaded one step ahead, the
# fastest way run 29 timed (bench.latency --experiments cp_persistent: 1.787 ms a frame against 1.876 with the products
# reading shared memory, 1.860 staged; the Triton passes 1.380). Still slower than the Triton passes: the option is off.
DEFAULT_MACROS: tuple[str, ...] = ("CP_REG_WEIGHTS=1",)


@dataclass(frozen=True)
class CpPassShapes:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    codes: int
    positions: int

    def macros(self) -> list[str]:
        return [f"-DCP_H={self.hidden}", f"-DCP_I={self.intermediate}", f"-DCP_HQ={self.heads}",
                f"-DCP_HKV={self.kv_heads}", f"-DCP_D={self.head_dim}", f"-DCP_L={self.layers}",
                f"-DCP_V={self.codes}", f"-DCP_P={self.positions}"]

    def problems(self) -> list[str]:
        """What the kernel's lane layout does not hold (its static_asserts, said before nvcc says them)."""
        out = []
        if self.head_dim != 128:
            out.append(f"head_dim {self.head_dim} (a lane holds 4 of 128)")
        if self.heads % self.kv_heads or self.heads // self.kv_heads > 4:
            out.append(f"{self.heads} query heads over {self.kv_heads} kv heads")
        if self.positions != 16:
            out.append(f"{self.positions} cache positions (16)")
        threads = 32 * self.kv_heads
        if self.hidden % (2 * threads) or self.hidden % 256 or self.intermediate % (2 * threads) \
                or self.intermediate % 256:
            out.append(f"hidden {self.hidden} / intermediate {self.intermediate} in {threads}-thread pairs")
        return out

    def slot_bytes(self, ctas: int) -> tuple[int, int]:
        """The two weight slots' bytes: the largest slice of an even step's weights a CTA holds (attention + o's,
        down's) and of an odd step's (gate/up's, its gate and its up rows; qkv's; the head's). Steps alternate."""
        def rows(n: int) -> int:
            return -(-n // ctas)
        h, q = self.hidden, self.heads * self.head_dim
        qkv_n = (self.heads + 2 * self.kv_heads) * self.head_dim
        even = max(rows(h) * q, rows(h) * self.intermediate) * 2
        odd = max(rows(qkv_n) * h, 2 * rows(self.intermediate) * h, rows(self.codes) * h) * 2
        return -(-even // ALIGN) * ALIGN, -(-odd // ALIGN) * ALIGN

    def cache_bytes(self) -> int:
        """One layer's keys and values of the batch-1 row (the kernel's copy of them in shared memory)."""
        return 2 * self.kv_heads * self.positions * self.head_dim * 2

    def shared_bytes(self, ctas: int) -> int:
        xs = max(self.hidden, self.intermediate, self.heads * self.head_dim) * 2
        # two weight slots, the cache, two input vectors, the norm's partial sums, two barriers
        return sum(self.slot_bytes(ctas)) + self.cache_bytes() + 2 * xs + 32 * 4 + 16


def compile_cp_pass(shapes: CpPassShapes, macros: tuple[str, ...] = ()) -> bytes:
    """The kernel's cubin for sm_90a at these shapes (and `macros`, e.g. "CP_POLL_PAUSE_NS=0"): from the cache, else
    built by nvcc (RuntimeError with nvcc's output if it fails)."""
    return cuda_build.compile_cubin(SOURCE, [*shapes.macros(), *(f"-D{m}" for m in macros)], "cp_pass")


def unsupported(device: torch.device, shapes: CpPassShapes | None = None) -> str | None:
    """Why the kernel cannot run on `device` here (None: it can)."""
    why = cuda_build.unsupported(device, "cp_pass")
    if why is None and shapes is not None and shapes.problems():
        return "shapes: " + "; ".join(shapes.problems())
    return why


# ---- the kernel's parameters (kernels/cuda/cp_pass.cu CpLayer, CpPassParams) ---------------------------------------

class _Layer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("w_qkv", "w_o", "w_gu", "w_down", "ln_in", "ln_post", "q_norm", "k_norm", "k_cache", "v_cache")]


def _params_type(layers: int) -> type[ctypes.Structure]:
    pointers = ("x_in", "qkv0", "norm", "head", "cos", "sin", "qkv", "res0", "res1", "act", "logits", "launches",
                "error", "trace")

    class Params(ctypes.Structure):
        _fields_ = [("layer", _Layer * layers), *((name, ctypes.c_void_p) for name in pointers),
                    ("pos", ctypes.c_int), ("eps", ctypes.c_float), ("scale", ctypes.c_float),
                    ("slot1_at", ctypes.c_uint), ("cache_at", ctypes.c_uint)]
    return Params


class CpPassKernel:
    """The persistent pass over a `FusedStack` (its layers' fused weights) and the runner's state: heads [15, V, H],
    the caches [layers, rows, Hkv, P, D] (row 0 is the pass's), RoPE tables cos / sin [P, D]; all bf16 on one sm90
    GPU. It owns its scratch (qkv, the residual's two buffers, SwiGLU's output), the logits it writes and its
    launch count: two kernels of one CpPassKernel must not run at once (the runner's one stream sees to it)."""

    def __init__(self, stack, heads: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 cos: torch.Tensor, sin: torch.Tensor, macros: tuple[str, ...] = ()):
        device = heads.device
        self.shapes = CpPassShapes(hidden=heads.shape[2], intermediate=stack.intermediate, heads=stack.num_heads,
                                   kv_heads=stack.num_kv_heads, head_dim=stack.head_dim, layers=len(stack.layers),
                                   codes=heads.shape[1], positions=k_cache.shape[3])
        why = unsupported(device, self.shapes)
        if why:
            raise RuntimeError(f"cp_pass: {why}")
        tensors = [heads, k_cache, v_cache, cos, sin, stack.norm] + [
            w for layer in stack.layers for w in (layer.w_qkv, layer.w_o, layer.w_gate_up, layer.w_down,
                                                  layer.ln_in, layer.ln_post, layer.q_norm, layer.k_norm)]
        if any(t.dtype != torch.bfloat16 or not t.is_contiguous() or t.device != device for t in tensors):
            raise ValueError("cp_pass: weights, heads, caches and RoPE tables must be contiguous bf16 on one device")
        self.device, self.stack, self.heads = device, stack, heads
        self.k_cache, self.v_cache, self.cos, self.sin = k_cache, v_cache, cos, sin
        s = self.shapes
        self.ctas = torch.cuda.get_device_properties(device).multi_processor_count
        self.slot_bytes = s.slot_bytes(self.ctas)  # (even steps', odd steps')
        self.shared_bytes = s.shared_bytes(self.ctas)
        # scratch in tagged words (the kernel's value + step tag, int64 here), zero: no step's tag
        tagged = dict(device=device, dtype=torch.int64)
        self.qkv = torch.zeros((s.heads + 2 * s.kv_heads) * s.head_dim, **tagged)
        self.res = torch.zeros(2, s.hidden, **tagged)
        self.act = torch.zeros(s.intermediate, **tagged)
        self.logits = torch.zeros(1, s.codes, device=device, dtype=torch.bfloat16)
        self.launches = torch.zeros(1, dtype=torch.int32, device=device)
        self.error = torch.zeros(1, dtype=torch.int32, device=device)
        # CP_TRACE's stamps: a row a pass by position (2 .. P-1), cp_pass.cu's TRACE_WORDS
        self.steps = 4 * s.layers
        self.trace = torch.zeros(s.positions - 2, 4 + 5 * self.steps, dtype=torch.int64, device=device)
        self.macros = (f"CP_CTAS={self.ctas}", *macros)  # the grid is compiled in: the register layout depends on it
        self.kernel = CudaKernel(compile_cp_pass(s, self.macros), "cp_pass", device, self.shared_bytes)
        self._params = _params_type(s.layers)
        self._layers = (_Layer * s.layers)(*(
            _Layer(layer.w_qkv.data_ptr(), layer.w_o.data_ptr(), layer.w_gate_up.data_ptr(), layer.w_down.data_ptr(),
                   layer.ln_in.data_ptr(), layer.ln_post.data_ptr(), layer.q_norm.data_ptr(), layer.k_norm.data_ptr(),
                   k_cache[i, 0].data_ptr(), v_cache[i, 0].data_ptr()) for i, layer in enumerate(stack.layers)))

    def launch(self, pos: int, x_in: torch.Tensor, qkv0: torch.Tensor, codebook: int, pdl: bool = True) -> torch.Tensor:
        """One pass at cache position pos (2 .. P-1) of row 0: x_in [H] its input (the projected embedding of the
        code drawn before), qkv0 [(Hq + 2 Hkv) D] layer 0's qkv product of it (the table row), codebook: the head
        (1-based codebook - 1, as `heads` is indexed) -> self.logits [1, V] (written when the launch runs; the K/V of
        pos stored in the caches). pdl: launched with programmatic dependent launch (it waits for the launch
        before it ahead of reading x_in, qkv0 or its residual; the kernel before must let it start only after its
        own wait, as the runner's draws then do)."""
        s = self.shapes
        if not 2 <= pos < s.positions:
            raise ValueError(f"cp_pass: position {pos} outside 2..{s.positions - 1} (passes 1-14)")
        for name, t, n in (("x_in", x_in, s.hidden), ("qkv0", qkv0, self.qkv.numel())):  # plain bf16, the draw's
            if t.numel() != n or t.dtype != torch.bfloat16 or not t.is_contiguous() or t.device != self.device:
                raise ValueError(f"cp_pass: {name} must be {n} contiguous bf16 values on {self.device}")
        p = self._params()
        p.layer = self._layers
        p.x_in, p.qkv0, p.norm = x_in.data_ptr(), qkv0.data_ptr(), self.stack.norm.data_ptr()
        p.head = self.heads[codebook].data_ptr()
        p.cos, p.sin = self.cos[pos].data_ptr(), self.sin[pos].data_ptr()
        p.qkv, p.res0, p.res1, p.act = self.qkv.data_ptr(), self.res[0].data_ptr(), self.res[1].data_ptr(), \
            self.act.data_ptr()
        p.logits, p.launches, p.error = self.logits.data_ptr(), self.launches.data_ptr(), self.error.data_ptr()
        p.trace = self.trace.data_ptr()
        p.pos, p.eps, p.scale = pos, self.stack.eps, LOG2E / math.sqrt(s.head_dim)
        p.slot1_at, p.cache_at = self.slot_bytes[0], sum(self.slot_bytes)
        self.kernel.launch(self.ctas, 32 * s.kv_heads, p, pdl)
        return self.logits

    def timed_out(self) -> bool:
        """Did a launch's wait for the other CTAs time out (its outputs garbage)? Synchronises."""
        return bool(self.error.item())

    def trace_phases(self) -> dict:
        """A kernel built with CP_TRACE: `trace_phases` of its stamps (synchronises)."""
        return trace_phases(self.trace.cpu().tolist(), self.shapes.layers)


def trace_phases(rows: list[list[int]], layers: int) -> dict:
    """CP_TRACE's stamps (CTA 0's, a row a position: cp_pass.cu's TRACE_WORDS) -> the traced passes' phases, averaged
    (µs). `launch`: a launch's start to its end; `wait`: its start to the end of its wait for the launch before; per
    step kind, from the step's start (the step before's end): `poll` until thread 0's input words arrived, `cache` until
    the cache's copies arrived (attention; else 0), `norm` until the input is ready (the norm; attention + o: the
    attention), `weights` until the weights are ready (in registers: 0, the product waits for them), `product` until
    the step's end. clock64 is converted by the launch's %globaltimer span. Empty if no pass was traced (rows never
    written are zeros)."""
    kinds = ["att", "gu", "down"] + ["qkv", "att", "gu", "down"] * (layers - 1) + ["head"]
    phases = ("poll", "cache", "norm", "weights", "product")
    rows = [r for r in rows if r[1] > r[0]]
    if not rows:
        return {}
    sums = {k: dict.fromkeys(phases, 0.0) for k in kinds}
    counts = dict.fromkeys(kinds, 0)
    launch = wait = 0.0
    for g0, g1, c0, c1, *steps in rows:
        ns = (g1 - g0) / max(steps[-1] - c0, 1)  # ns a clock
        launch += (g1 - g0) / 1e3
        wait += (c1 - c0) * ns / 1e3
        before = c1
        for i, kind in enumerate(kinds):
            stamps = steps[len(phases) * i: len(phases) * (i + 1)]
            for phase, a, b in zip(phases, (before, *stamps[:-1]), stamps):
                sums[kind][phase] += (b - a) * ns / 1e3
            counts[kind] += 1
            before = stamps[-1]
    out = {"passes": len(rows), "launch": launch / len(rows), "wait": wait / len(rows)}
    return out | {k: {ph: v / counts[k] for ph, v in sums[k].items()} for k in sums}
