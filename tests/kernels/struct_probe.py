"""What the CUDA kernels' build tests share: a C++ struct's layout as nvcc lays it out, to check a ctypes Structure
against (kernels/cp_draw.py's and kernels/cp_gemv.py's parameters)."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

from tts_engine.kernels import cuda_build


def assert_ctypes_layout(tmp_path: Path, source: Path, struct: str, params: type[ctypes.Structure],
                         macros: tuple[str, ...]) -> None:
    """`params` (a ctypes Structure) has the size and field offsets of C++ `struct` in `source` built with `macros`."""
    fields = [name for name, _ in params._fields_]
    probe = tmp_path / "probe.cu"
    probe.write_text(f'#include "{source}"\n#include <cstdio>\n#include <cstddef>\nint main() {{\n'
                     f'  printf("size %zu\\n", sizeof({struct}));\n'
                     + "".join(f'  printf("{f} %zu\\n", offsetof({struct}, {f}));\n' for f in fields) + "}\n")
    exe = tmp_path / "probe"
    built = subprocess.run([cuda_build.nvcc(), cuda_build.ARCH, "-std=c++17", *(f"-D{m}" for m in macros), "-o",
                            str(exe), str(probe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    printed = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                                 check=True).stdout.splitlines())
    assert int(printed["size"]) == ctypes.sizeof(params)
    for f in fields:
        assert int(printed[f]) == getattr(params, f).offset, f
