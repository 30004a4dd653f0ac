"""Each product's launch configuration swept inside its batch-1 step, not alone.

Run 13's `bench.kernels --gemv-sweep` timed each product chained with itself, and its winners did not win
in the step (a chain of different kernels overlaps differently under PDL: docs/perf-notes.md Version 10).
Here every candidate is timed as the whole step it runs in: the talker's PDL step
(`runner.talker_pdl_launch`) and the code predictor's frame (`cp_launch.PDL_LAUNCH`), by coordinate
descent: each product in turn tries every candidate with the others held at their best so far, for
`rounds` rounds; then today's table and the best are timed against each other, interleaved.

    python -m bench.step_sweep --out step-sweep.json [--rounds 2]
                               [--stages talker,cp,talker_down,cp_down,talker_stream,cp_stream,talker_fine,draw]
                               [--wide talker]

`bench.latency --pdl-launch-from step-sweep.json` times issue 3's table with the tables found.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

# Whole-row products under PDL: rows of w a program, warps a program.
CANDIDATES = tuple(dict(block_n=bn, num_warps=w) for bn in (1, 2, 4, 8) for w in (2, 4, 8))
# Past CANDIDATES' largest programs (run 20's first sweep kept 8 rows for the talker's qkv and gate/up, its
# largest): up to 32 whole rows a program, with the warps to hold them.
WIDE_CANDIDATES = tuple(dict(block_n=bn, num_warps=w) for bn in (8, 16, 32) for w in (4, 8, 16))
# Stages "talker_down" / "cp_down": the down product alone (K 6,144 / 3,072, not powers of two), its rows whole
# (one slice padded to the next power of two) or in three power-of-two slices (gemv `row_chunks`).
SLICED_CANDIDATES = tuple(dict(block_n=bn, num_warps=w, row_chunks=c) for c in (1, 3) for bn in (2, 4, 8)
                          for w in (4, 8, 16))
# Stages "talker_stream" / "cp_stream": every product's blocks of whole rows streamed a few a program (gemv
# `row_blocks`: the next block's weights loading while the last one's are summed; untimed before this sweep), for
# grids from about one wave (16 blocks a program) to four; down's rows (K 6,144 / 3,072) also in three slices.
STREAM_CANDIDATES = tuple(dict(block_n=bn, num_warps=w, row_blocks=b) for b in (2, 4, 8, 16) for bn in (1, 2, 4)
                          for w in (4, 8))
STREAM_DOWN_CANDIDATES = tuple({**c, "row_chunks": n} for n in (1, 3) for c in STREAM_CANDIDATES)
# Stage "talker_fine": around run 22's talker_stream winners (bench/results/run22-h200/call1: gate/up 1 row x 8
# blocks 4 warps, down 2 x 4 8 warps, qkv and o kept whole-row; the next few within ~1 % of each), a
# product's neighbours in rows, warps and blocks (row_blocks 1 is the whole-row kernel). Run 22's call 3 chose
# today's TALKER_PDL_LAUNCH from these; gate/up's 5 and 7 blocks were added after it (6 had won over 4 and 8).
TALKER_FINE_CANDIDATES = {
    "qkv": tuple(dict(block_n=bn, num_warps=w, row_blocks=b) for bn in (4, 8) for w in (4, 8) for b in (1, 2, 3)),
    "o": tuple(dict(block_n=bn, num_warps=w, row_blocks=b) for bn in (2, 4) for w in (2, 4) for b in (1, 2, 3)),
    "gate_up": tuple(dict(block_n=1, num_warps=w, row_blocks=b) for w in (2, 4) for b in (5, 6, 7, 8, 10, 12, 16))
    + tuple(dict(block_n=bn, num_warps=4, row_blocks=b) for bn, b in ((2, 4), (2, 6), (4, 3), (4, 4), (4, 5))),
    "down": tuple(dict(block_n=2, num_warps=8, row_chunks=1, row_blocks=b) for b in (3, 4, 5, 6))
    + tuple(dict(block_n=1, num_warps=4, row_chunks=3, row_blocks=b) for b in (3, 4, 6, 8))
    + tuple(dict(block_n=2, num_warps=8, row_chunks=3, row_blocks=b) for b in (3, 4, 6))
    + tuple(dict(block_n=1, num_warps=8, row_chunks=1, row_blocks=b) for b in (6, 8, 12)),
}
# The whole-row products of each batch-1 step, in the order the sweep visits them.
# The code predictor's o product is its attention + o launch's (FastPathOptions.cp_attention_o, the default; its
# launches: bench.latency --experiments cp_attention_o), so its PDL_LAUNCH entry is not swept.
PRODUCTS = {"talker": ("qkv", "o", "gate_up", "down"), "cp": ("qkv", "gate_up", "down", "head")}
# Stage "draw": every draw's launch (kernels/sample.py DRAW_LAUNCH: warps of a row's program, halvings of
# the top-k search, parts a halving cuts), timed as the code predictor's frame (15 of its draws).
# Run 26 (call 2) chose 8 warps, 10 halvings, 2 ways; call 3 (8 warps, 6-12 halvings, with a draw since reverted whose
# walk steps took one reduction each) kept 10 (9 tied).
DRAW_CANDIDATES = tuple(dict(num_warps=w, top_k_window=n, top_k_ways=ways)
                        for w in (4, 8, 16) for n in (10, 12, 14) for ways in (2, 3))


def stream_candidates(products: tuple[str, ...]) -> dict[str, tuple[dict, ...]]:
    """A stream stage's candidates a product: STREAM_CANDIDATES, and for down those in one slice or three."""
    return {name: STREAM_DOWN_CANDIDATES if name == "down" else STREAM_CANDIDATES for name in products}


def _key(cfg: dict) -> str:
    if "block_n" in cfg:
        return (f"n{cfg['block_n']}w{cfg['num_warps']}" + (f"c{cfg['row_chunks']}" if "row_chunks" in cfg else "")
                + (f"b{cfg['row_blocks']}" if "row_blocks" in cfg else ""))
    return f"w{cfg['num_warps']}k{cfg['top_k_window']}x{cfg['top_k_ways']}"  # a draw's launch


def coordinate_sweep(measure: Callable[[], float], table: dict[str, dict], names: tuple[str, ...],
                     candidates: tuple[dict, ...] | dict[str, tuple[dict, ...]] = CANDIDATES, rounds: int = 2,
                     keep_competes: bool = False, progress: Callable[[dict], None] | None = None) -> dict:
    """measure(): the step's time with `table` as it is now (the caller's step reads it). Each of `names`
    in turn is set to every candidate (merged into its entry; `candidates` one tuple for all, or a tuple a
    name) with the others at their best; it keeps its fastest. keep_competes: its entry as it stands is timed
    too (as "kept") and stays if it is the fastest (for candidates that leave today's kind of launch out,
    the stream stages'). A candidate that raises is reported, never kept. Leaves `table` at the best found.
    progress(partial): called after each product with the result so far (a sweep cut off keeps its trials).
    -> {"start_ms", "best": {name: cfg}, "best_ms", "trials": [{"round", "product", "times"}]}"""
    start = measure()
    best_ms, trials = start, []
    for r in range(rounds):
        for name in names:
            kept = dict(table[name])
            times: dict[str, float | str] = {}
            tried = candidates[name] if isinstance(candidates, dict) else candidates
            if keep_competes:
                times["kept"] = measure()
            for cand in tried:
                table[name] = {**kept, **cand}
                try:
                    times[_key(cand)] = measure()
                except Exception as exc:  # a launch that does not compile or fit: not a winner
                    times[_key(cand)] = f"{type(exc).__name__}: {exc}"[:160]
            timed = {k: v for k, v in times.items() if isinstance(v, float)}
            winner = min(timed, key=timed.get) if timed else None
            table[name] = {**kept, **next(c for c in tried if _key(c) == winner)} if winner not in (None, "kept") \
                else kept
            if winner:
                best_ms = timed[winner]
            trials.append({"round": r, "product": name, "times": times, "kept": _key(table[name])})
            if progress is not None:
                progress({"start_ms": start, "best": {n: dict(table[n]) for n in names}, "best_ms": best_ms,
                          "trials": trials, "partial": True})
    return {"start_ms": start, "best": {n: dict(table[n]) for n in names}, "best_ms": best_ms, "trials": trials}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.step_sweep")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--stages", default="talker,cp",
                   help="talker (its PDL step), cp (the code predictor's frame), draw (every draw's launch, timed as "
                        "the code predictor's frame), talker_down / cp_down (the down product alone, its rows whole "
                        "or in three slices), talker_stream / cp_stream (every product's row blocks streamed a few a "
                        "program), talker_fine (the talker's launches around run 22's stream winners)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--wide", default="", help="stages swept over WIDE_CANDIDATES instead (e.g. talker)")
    args = p.parse_args(argv)
    import torch

    import tts_engine.runtime.code_predictor as cp_module
    from bench.cuda_timing import cuda_time_ms, graph_of
    from bench.stages import prefill_every_slot, stage_fns
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.runner import ModelRunner

    if not torch.cuda.is_available():
        p.error("bench.step_sweep needs a CUDA device")
    _, model = random_model("1.7b", torch.bfloat16, torch.device("cuda"))
    runner = ModelRunner(model, max_slots=1, max_context=512, buckets=(1,))
    if not (runner.talker_pdl and runner.code_predictor.uses_pdl(1)):
        p.error("the batch-1 steps do not run with PDL on this device: nothing to sweep")
    t_len = 22
    prefill_every_slot(runner, torch.randn(t_len, runner.cfg.hidden_size, device="cuda", dtype=torch.bfloat16))
    wide = set(filter(None, args.wide.split(",")))
    import tts_engine.kernels.sample as sample_module

    def candidates(stage: str) -> tuple[dict, ...] | dict[str, tuple[dict, ...]]:
        if stage.endswith("_down"):
            return SLICED_CANDIDATES
        if stage.endswith("_stream"):
            return stream_candidates(PRODUCTS[stage.removesuffix("_stream")])
        if stage == "talker_fine":
            return TALKER_FINE_CANDIDATES
        return DRAW_CANDIDATES if stage == "draw" else WIDE_CANDIDATES if stage in wide else CANDIDATES

    def keys(cands) -> list[str] | dict[str, list[str]]:
        return {n: keys(c) for n, c in cands.items()} if isinstance(cands, dict) else [_key(c) for c in cands]

    out: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                 "candidates": {stage: keys(candidates(stage)) for stage in args.stages.split(",")}}
    with torch.inference_mode():
        fns = stage_fns(runner, 1, t_len)
        stages = {"talker": ("talker_step", lambda table: setattr(runner, "talker_pdl_launch", table),
                             dict(runner.talker_pdl_launch), PRODUCTS["talker"]),
                  "cp": ("code_predictor_frame", lambda table: cp_module.PDL_LAUNCH.update(table),
                         dict(cp_module.PDL_LAUNCH), PRODUCTS["cp"]),
                  "draw": ("code_predictor_frame", lambda table: sample_module.DRAW_LAUNCH.update(table["draw"]),
                           {"draw": dict(sample_module.DRAW_LAUNCH)}, ("draw",))}
        stages["talker_down"] = (*stages["talker"][:3], ("down",))
        stages["cp_down"] = (*stages["cp"][:3], ("down",))
        stages["talker_stream"] = stages["talker_fine"] = stages["talker"]
        stages["cp_stream"] = stages["cp"]
        for stage in args.stages.split(","):
            fn_name, install, default, names = stages[stage]
            table = {k: dict(v) for k, v in default.items()}
            install(table)

            def measure(fn_name=fn_name, table=table, install=install):
                install(table)
                return cuda_time_ms(graph_of(fns[fn_name]))

            def progress(partial, stage=stage):
                out[stage] = partial
                args.out.write_text(json.dumps(out, indent=1))
            result = coordinate_sweep(measure, table, names, candidates(stage), rounds=args.rounds,
                                      keep_competes=stage.endswith(("_stream", "_fine")), progress=progress)
            pair = {"default": [], "best": []}  # interleaved, three rounds
            for _ in range(3):
                for label, t in (("default", default), ("best", result["best"])):
                    install({**default, **t})
                    pair[label].append(cuda_time_ms(graph_of(fns[fn_name])))
            install(default)
            result["interleaved_ms"] = pair
            out[stage] = result
            args.out.write_text(json.dumps(out, indent=1))  # each stage as it ends: a later one may be cut off
            print(f"{stage}: start {result['start_ms']:.4f} best {result['best_ms']:.4f} ms {result['best']}; "
                  f"interleaved {pair}", flush=True)
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
