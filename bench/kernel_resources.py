"""Registers and stack (spills) of the batch-1 whole-row GEMV launches, compiled for sm90 on this machine
(no GPU needed: Triton compiles for a named target and its bundled cuobjdump reads the cubin).

    python -m bench.kernel_resources            # the talker's and the code predictor's PDL tables, as launched
    python -m bench.kernel_resources --stream   # each product's launches of bench.step_sweep's STREAM_CANDIDATES

Each line also says how many of the launch's programs an SM holds at once (`programs_per_sm`: sm90's 64K
registers, 64 warps and 32 programs an SM): a product's bytes in flight are its resident programs' loads, and
run 22 found the talker's gate/up 6 % of a step faster at 6 row blocks a program (78 registers, 6 programs an
SM) than at 8 (95, 5).

The installed Triton compiles, which may not be the GPU host's (3.9 here, 3.6 there): the figures say what
a kernel asks of the register file, not what the card's compiler gives it to the register.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

# Each batch-1 product: (K, its epilogue: 0 plain, 1 + residual, 2 SwiGLU, whether an RMSNorm prologue).
SHAPES = {"talker": {"qkv": (2048, 0, True), "o": (2048, 1, False), "gate_up": (2048, 2, True),
                     "down": (6144, 1, False)},
          "cp": {"qkv": (1024, 0, True), "o": (2048, 1, False), "gate_up": (1024, 2, True), "down": (3072, 1, False),
                 "head": (1024, 0, True)}}


def programs_per_sm(registers: int, num_warps: int) -> int:
    """Programs of one launch an sm90 SM holds at once, by registers (allocated 256 a warp at a time, 64K an
    SM), warps (64 an SM) and programs (32 an SM); shared memory (1 KB here) never binds."""
    per_warp = -(-registers * 32 // 256) * 256
    return min(65536 // (per_warp * num_warps), 64 // num_warps, 32)


def _with_occupancy(line: str, num_warps: int) -> str:
    return f"{line} ({programs_per_sm(int(line.split()[0][4:]), num_warps)} an SM)"


def resources(k: int, mode: int, norm: bool, block_n: int, num_warps: int, row_chunks: int = 1,
              residual_early: bool = False, row_blocks: int = 1) -> str:
    """cuobjdump's resource line of one whole-row launch (bf16, one row of x, PDL; mode as in SHAPES)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tts_engine.kernels import gemv as g
    from tts_engine.kernels.backend import next_pow2

    fn = g._gemv_row_stream_kernel if row_blocks > 1 else g._gemv_rows_kernel if row_chunks == 1 \
        else g._gemv_row_slices_kernel
    pointers = dict.fromkeys(("x_ptr", "w_ptr", "r_ptr", "ln_ptr", "y_ptr"), "*bf16")
    scalars = dict.fromkeys(("m", "n_out", "k", "s_x", "s_w", "s_r", "s_y"), "i32")
    signature = {**pointers, **scalars, "eps": "fp32", **dict.fromkeys(fn.arg_names[13:], "constexpr")}
    consts = dict(MODE=mode, NORM=norm, M_P=1, BLOCK_N=block_n, BLOCK_K=next_pow2(-(-k // row_chunks)), PDL=True,
                  RES_EARLY=residual_early and mode == 1)
    if row_chunks > 1 or row_blocks > 1:
        consts["CHUNKS"] = row_chunks
    if row_blocks > 1:
        consts["BLOCKS"] = row_blocks
    src = ASTSource(fn=fn, signature=signature, constexprs={(fn.arg_names.index(n),): v for n, v in consts.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True, check=True)
    line = next(ln for ln in out.stdout.splitlines() if "REG:" in ln)
    return " ".join(line.split()[:3])  # REG:n STACK:n SHARED:n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", action="store_true",
                   help="the row-block streaming kernel (gemv row_blocks) at 2 blocks a program; the count can change "
                        "its registers (the talker's gate/up: 95 at 4 and 8 blocks, 78 at 6)")
    if p.parse_args(argv).stream:
        return _stream()
    from tts_engine.runtime.code_predictor import PDL_LAUNCH
    from tts_engine.runtime.runner import TALKER_PDL_LAUNCH

    for stage, table in (("talker", TALKER_PDL_LAUNCH), ("cp", PDL_LAUNCH)):
        for product, (k, mode, norm) in SHAPES[stage].items():
            cfg = table[product]
            keys = dict(block_n=cfg["block_n"], num_warps=cfg["num_warps"],
                        residual_early=cfg.get("residual_early", False), row_blocks=cfg.get("row_blocks", 1))
            blocks = f" x {keys['row_blocks']} blocks" if keys["row_blocks"] > 1 else ""
            line = f"{stage} {product} (K {k}, {cfg['block_n']} rows{blocks}, {cfg['num_warps']} warps): "
            line += _with_occupancy(resources(k, mode, norm, row_chunks=cfg.get("row_chunks", 1), **keys),
                                    cfg["num_warps"])
            if k & (k - 1):  # not a power of two: the sliced kernel beside it
                sliced = resources(k, mode, norm, row_chunks=3, **keys)
                line += f"; in 3 slices {_with_occupancy(sliced, cfg['num_warps'])}"
            print(line, flush=True)
    return 0


def _stream() -> int:
    from bench.step_sweep import STREAM_CANDIDATES

    launches = sorted({(c["block_n"], c["num_warps"]) for c in STREAM_CANDIDATES})
    for stage, shapes in SHAPES.items():
        for product, (k, mode, norm) in shapes.items():
            for block_n, warps in launches:
                for chunks in (1, 3) if k & (k - 1) else (1,):  # as the sweep: down also in three slices
                    got = resources(k, mode, norm, block_n, warps, row_chunks=chunks, residual_early=mode == 1,
                                    row_blocks=2)
                    print(f"{stage} {product} (K {k}, {block_n} rows, {warps} warps, streamed"
                          f"{', in 3 slices' if chunks > 1 else ''}): {_with_occupancy(got, warps)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
