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

import triton

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
              residual_early: bool = False, row_blocks: int = 1, delta: int = 0) -> str:
    """cuobjdump's resource line of one whole-row launch (bf16, one row of x, PDL; mode as in SHAPES)."""
    return _resource_line(whole_row_kernel(k, mode, norm, block_n, num_warps, row_chunks, residual_early, row_blocks,
                                           delta))


def whole_row_kernel(k: int, mode: int, norm: bool, block_n: int, num_warps: int, row_chunks: int = 1,
                     residual_early: bool = False, row_blocks: int = 1, delta: int = 0, pdl: int = 1,
                     evict: str = ""):
    """One whole-row launch (as `resources`') compiled for sm90: Triton's compiled kernel (its `asm` holds the PTX
    and the cubin). pdl: its PDL (1, or backend.PDL_EARLY); evict: its weights' L2 eviction priority (one slice and
    one block only)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tts_engine.kernels import gemv as g
    from tts_engine.kernels import gemv_rows as gr
    from tts_engine.kernels.backend import next_pow2

    fn = gr._gemv_row_stream_kernel if row_blocks > 1 else g._gemv_rows_kernel if row_chunks == 1 \
        else gr._gemv_row_slices_kernel
    pointers = dict.fromkeys(("x_ptr", "w_ptr", "r_ptr", "ln_ptr", "y_ptr"), "*bf16")
    scalars = dict.fromkeys(("m", "n_out", "k", "s_x", "s_w", "s_r", "s_y"), "i32")
    signature = {**pointers, **scalars, "eps": "fp32", **dict.fromkeys(fn.arg_names[13:], "constexpr")}
    consts = dict(MODE=mode, NORM=norm, M_P=1, BLOCK_N=block_n, BLOCK_K=next_pow2(-(-k // row_chunks)), PDL=pdl,
                  RES_EARLY=residual_early and mode == 1)
    if "d_ptr" in signature:  # the kernels that take gemv's x_delta / residual_delta
        signature.update(d_ptr="*i64", s_d="i32")
        consts["DELTA"] = delta
        consts["EVICT"] = evict
    if row_chunks > 1 or row_blocks > 1:
        consts["CHUNKS"] = row_chunks
    if row_blocks > 1:
        consts["BLOCKS"] = row_blocks
    src = ASTSource(fn=fn, signature=signature, constexprs={(fn.arg_names.index(n),): v for n, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


def _resource_line(kernel) -> str:
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True, check=True)
    line = next(ln for ln in out.stdout.splitlines() if "REG:" in ln)
    return " ".join(line.split()[:3])  # REG:n STACK:n SHARED:n


def attention_o_resources(block_r: int, num_warps: int, t: int = 1, evict: str = "") -> str:
    """cuobjdump's resource line of the code predictor's attention + o launch (`attention_o_kernel`)."""
    return _resource_line(attention_o_kernel(block_r, num_warps, t, evict))


def attention_o_kernel(block_r: int, num_warps: int, t: int = 1, evict: str = ""):
    """The code predictor's attention + o launch compiled for sm90 (1.7B shapes: 16 query heads, 8 kv heads of 128,
    16 positions), bf16, PDL; evict: w_o's L2 eviction priority."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tts_engine.kernels import cp_attention_o as ao

    fn = ao._cp_attention_o_kernel
    kinds = {**dict.fromkeys(fn.arg_names[:8], "*bf16"), "sum_ptr": "*i64", "start": "i32", "eps": "fp32",
             "scale": "fp32", **dict.fromkeys(("n_out", "s_qkv", "s_row", "s_head", "s_pos", "s_wo", "s_sum"), "i32")}
    signature = {n: kinds.get(n, "constexpr") for n in fn.arg_names}
    consts = dict(T=t, HQ=16, HKV=8, GROUP=2, GROUP_P=2, D=128, BLOCK_P=16, BLOCK_R=block_r, PDL=True, EVICT=evict)
    src = ASTSource(fn=fn, signature=signature, constexprs={(fn.arg_names.index(n),): v for n, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


def draw_kernel(window: int, ways: int, codebook0: bool, num_warps: int = 8):
    """The draw (kernels/sample.py `_sample_kernel`) compiled for sm90 at a top-k search (`sample_rows`' top_k_window,
    top_k_ways): the talker's codebook-0 draw (vocabulary 3072, its processors) or the code predictor's (2048, both
    gathers), with PDL. Triton's interpreter runs no compiler, so a kernel whose branches disagree on a variable's
    type passes there and fails here."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tts_engine.kernels import sample

    fn = sample._sample_kernel
    kinds = {"logits_ptr": "*bf16", "do_sample_ptr": "*i1", "temperature_ptr": "*fp32", "top_k_ptr": "*i64",
             "top_p_ptr": "*fp32", "seed_ptr": "*i64", "frame_ptr": "*i64", "penalty_ptr": "*fp32",
             "min_new_ptr": "*i64", "eos_ok_ptr": "*i1", "slot_ptr": "*i64", "seen_ptr": "*i1", "suppress_ptr": "*i1",
             "out_ptr": "*i64", "emb_ptr": "*bf16", "x_ptr": "*bf16", "emb2_ptr": "*bf16", "x2_ptr": "*bf16",
             **dict.fromkeys(("pf0_ptr", "pf1_ptr", "pf2_ptr"), "*u8")}
    consts = dict(CODEBOOK0=codebook0, GATHER=not codebook0, GATHER2=not codebook0, BLOCK=4096 if codebook0 else 2048,
                  EMB_BLOCK=1024, EMB2_BLOCK=1024, PDL=1, TOPK_WINDOW=window, TOPK_WAYS=ways, PF_LINES=0, PF_MODE=1)
    signature = {n: "constexpr" if n in consts else kinds.get(n, "i32") for n in fn.arg_names}
    src = ASTSource(fn=fn, signature=signature, constexprs={(fn.arg_names.index(n),): v for n, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", action="store_true",
                   help="the row-block streaming kernel (gemv row_blocks) at 2 blocks a program; the count can change "
                        "its registers (the talker's gate/up: 95 at 4 and 8 blocks, 78 at 6)")
    p.add_argument("--attention-o", action="store_true",
                   help="the code predictor's attention + o launch (cp_attention_o) at each candidate of "
                        "bench.latency's --experiments cp_attention_o, and its gate/up and down reading the sum")
    args = p.parse_args(argv)
    if args.stream:
        return _stream()
    if args.attention_o:
        return _attention_o()
    from tts_engine.runtime.cp_launch import PDL_LAUNCH
    from tts_engine.runtime.talker_launch import TALKER_PDL_LAUNCH

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


def _attention_o() -> int:
    from bench.latency_experiments import ATTENTION_O_CANDIDATES
    from tts_engine.runtime.cp_launch import ATTENTION_O_LAUNCH, PDL_LAUNCH

    launches = {**ATTENTION_O_CANDIDATES, **{f"default at {t}": launch for t, launch in ATTENTION_O_LAUNCH.items()}}
    for name, launch in launches.items():
        for t in (1, 2):
            got = attention_o_resources(launch["block_r"], launch["num_warps"], t)
            print(f"cp attention + o {name} ({launch['block_r']} features, {launch['num_warps']} warps, {t} "
                  f"position{'s' if t > 1 else ''} a row): {_with_occupancy(got, launch['num_warps'])}", flush=True)
    for product, delta in (("gate_up", 1), ("down", 2)):
        k, mode, norm = SHAPES["cp"][product]
        cfg = PDL_LAUNCH[product]
        got = resources(k, mode, norm, cfg["block_n"], cfg["num_warps"],
                        residual_early=cfg.get("residual_early", False), delta=delta)
        print(f"cp {product} reading the sum (K {k}, {cfg['block_n']} rows, {cfg['num_warps']} warps): "
              f"{_with_occupancy(got, cfg['num_warps'])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
