"""How the CUDA C++ kernels of kernels/cuda/ are built, loaded and launched (kernels/cp_pass.py, kernels/cp_draw.py).

    compile_cubin(source, flags, prefix)    -> the cubin for sm_90a: from the cache, else built by nvcc
    CudaKernel(cubin, name, device)         a loaded kernel; .launch(grid, block, params, pdl=...)

A kernel is compiled for sm_90a by nvcc at first use, with the model's shapes as macros, into a cache that outlives the
process ($CADENCE_CUDA_CACHE, else $XDG_CACHE_HOME/cadence/cuda, else ~/.cache/cadence/cuda) keyed by the source and the
flags, so only a machine's first start pays nvcc's seconds (each build is logged); loaded through the CUDA
driver (ctypes over libcuda, which PyTorch has loaded): no extension build, no new dependency. A launch is a
`cuLaunchKernelEx` on PyTorch's current stream, with programmatic dependent launch if asked, so it is captured in the
runner's CUDA graphs like any kernel. Every kernel takes one parameter, a struct passed by value (a ctypes Structure
laid out as the C++ one).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import torch

ARCH = "-gencode=arch=compute_90a,code=sm_90a"
log = logging.getLogger("tts_engine.startup")  # a start-up step, as runtime/progress.py's lines


def nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    path = Path(home) / "bin" / "nvcc"
    return str(path) if path.exists() else None


def cache_dir() -> Path:
    override = os.environ.get("CADENCE_CUDA_CACHE")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cadence" / "cuda"


def compile_cubin(source: Path, flags: list[str], prefix: str) -> bytes:
    """`source`'s cubin for sm_90a with `flags` (after ARCH, -O3, -std=c++17): from the cache, else built by nvcc
    (RuntimeError with nvcc's output if it fails)."""
    flags = [ARCH, "-O3", "-std=c++17", *flags]
    key = hashlib.sha256(source.read_bytes() + " ".join(flags).encode()).hexdigest()[:24]
    out = cache_dir() / f"{prefix}-{key}.cubin"
    if out.exists():
        return out.read_bytes()
    compiler = nvcc()
    if compiler is None:
        raise RuntimeError(f"{prefix}: no nvcc (set CUDA_HOME) to build {source.name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    started = time.monotonic()
    done = subprocess.run([compiler, "-cubin", *flags, "-o", str(tmp), str(source)], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{prefix}: nvcc failed:\n{done.stderr[-4000:]}")
    tmp.replace(out)
    log.info("start-up: nvcc built %s in %.1f s (kept in %s)", out.name, time.monotonic() - started, out.parent)
    return out.read_bytes()


def unsupported(device: torch.device, prefix: str) -> str | None:
    """Why a kernel of kernels/cuda/ cannot run on `device` here (None: it can): it needs an sm90 GPU, and nvcc unless
    a cubin of `prefix` is cached."""
    if device.type != "cuda":
        return "not a CUDA device"
    if torch.cuda.get_device_capability(device) != (9, 0):
        return f"built for sm_90a, the device is sm_{''.join(map(str, torch.cuda.get_device_capability(device)))}"
    if nvcc() is None and not any(cache_dir().glob(f"{prefix}-*.cubin")):
        return "no nvcc to build it"
    return None


# ---- the CUDA driver, through ctypes ---------------------------------------------------------------------------------

_CLUSTER_DIMENSION = 4  # CUlaunchAttributeID
_PROGRAMMATIC_STREAM_SERIALIZATION = 6
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CUfunction_attribute


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: the value a 64-byte union (an int; a cluster's x, y, z)
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


class Driver:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def check(self, status: int, what: str) -> None:
        if status:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise RuntimeError(f"{what}: CUDA error {status} ({(text.value or b'?').decode()})")

    def ensure_context(self, device: torch.device) -> None:
        """PyTorch's primary context current on this thread (the driver calls below need one)."""
        current = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        if current.value:
            return
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ctypes.c_int(device.index or 0)),
                   "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class CudaKernel:
    """Kernel `name` of a cubin, loaded in PyTorch's context on `device`; `shared`: the dynamic shared memory its
    launches take (bytes)."""

    def __init__(self, cubin: bytes, name: str, device: torch.device, shared: int = 0):
        self.device, self.shared, self.name = device, shared, name
        self.driver = Driver()
        self.driver.ensure_context(device)
        self.cubin = cubin  # the module's image: kept alive with the module
        self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        lib = self.driver.lib
        self.driver.check(lib.cuModuleLoadData(ctypes.byref(self.module), ctypes.c_char_p(cubin)), "cuModuleLoadData")
        self.driver.check(lib.cuModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()),
                          "cuModuleGetFunction")
        if shared:
            self.driver.check(lib.cuFuncSetAttribute(self.function, _MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                     ctypes.c_int(shared)), "cuFuncSetAttribute")

    def launch(self, grid: int | tuple[int, int], block: int, params: ctypes.Structure, pdl: bool,
               cluster: tuple[int, int] | None = None) -> None:
        """One launch on PyTorch's current stream, `params` its one argument; grid: CTAs, or (x, y); pdl: with
        programmatic dependent launch (it may start before the launch ahead of it ends; its griddepcontrol.wait waits
        for that launch); cluster: CTAs (x, y) a thread block cluster, each of grid's a multiple of it."""
        attrs = []
        if pdl:
            attrs.append(_LaunchAttribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=(ctypes.c_uint * 16)(1)))
        if cluster is not None:
            attrs.append(_LaunchAttribute(id=_CLUSTER_DIMENSION, value=(ctypes.c_uint * 16)(*cluster, 1)))
        array = (_LaunchAttribute * max(1, len(attrs)))(*attrs)
        gx, gy = grid if isinstance(grid, tuple) else (grid, 1)
        cfg = _LaunchConfig(grid=(ctypes.c_uint * 3)(gx, gy, 1), block=(ctypes.c_uint * 3)(block, 1, 1),
                            shared=self.shared, stream=torch.cuda.current_stream(self.device).cuda_stream,
                            attrs=array, num_attrs=len(attrs))
        args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(params), ctypes.c_void_p))
        self.driver.ensure_context(self.device)
        self.driver.check(self.driver.lib.cuLaunchKernelEx(ctypes.byref(cfg), self.function, args, None),
                          f"{self.name}: cuLaunchKernelEx")
