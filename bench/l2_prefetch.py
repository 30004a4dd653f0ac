"""Would the talker's step gain from streaming weights into L2 while its attention runs? (An experiment;
nothing in the engine uses it.)

At batch 1 a talker layer is ~36 µs of products against 24 of weights, plus ~8 µs of q/k norm + RoPE and
attention during which HBM carries almost nothing (a short KV read). PDL lets each product load its first
wave of weights before it waits for the kernel ahead, but only one kernel ahead. Here a side branch of the
step's graph, forked after each layer's qkv product, issues `prefetch.global.L2` for the next products'
weights (o, then gate/up, up to a byte budget) while the q/k norm and attention run, so that those products
read that much from L2 instead of HBM. The step is timed (CUDA events over graph replays, as bench.latency)
with budgets of 0 (the fork alone), o only, and more; the step's output is checked against the plain step.

    python -m bench.l2_prefetch --out l2-prefetch.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from bench.cuda_timing import cuda_time_ms, graph_of
from tts_engine.kernels.backend import prefetch_l2, prefetch_window

LINE = 128  # bytes an L2 prefetch brings in


@triton.jit
def _prefetch_kernel(base, n_lines, LINES: tl.constexpr):
    lines, ok = prefetch_window(tl.program_id(0) * LINES, n_lines, LINES)
    prefetch_l2(base, lines, ok, 1)  # the PTX prefetch: this experiment runs on a GPU only


def l2_prefetch(tensors: list[torch.Tensor], budget: int, lines_a_program: int = 1024) -> None:
    """Prefetch the first `budget` bytes of tensors (in order, each contiguous) into L2."""
    for t in tensors:
        n = min(budget, t.numel() * t.element_size())
        if n <= 0:
            return
        lines = triton.cdiv(n, LINE)
        base = t.view(torch.uint8)
        _prefetch_kernel[(triton.cdiv(lines, lines_a_program),)](base, lines, LINES=lines_a_program, num_warps=4)
        budget -= n


def patched_step(budget: int, side: torch.cuda.Stream):
    """fused.decoder_step_gemv with the side branch (budget bytes a layer, o's weights first)."""
    from tts_engine.kernels.gemv import gemv
    from tts_engine.runtime.fused import _attention

    def step(stack, x, rope_cos, rope_sin, positions, rows, k_caches, v_caches, attend, launch, pdl=False,
             qkv_attend=None):
        eps, res = stack.eps, x
        main = torch.cuda.current_stream()
        for i, layer in enumerate(stack.layers):
            qkv_out = gemv(res, layer.w_qkv, norm=(layer.ln_in, eps), **launch["qkv"])
            side.wait_stream(main)
            with torch.cuda.stream(side):
                l2_prefetch([layer.w_o, layer.w_gate_up], budget)
            attn = _attention(stack, i, layer, qkv_out, rope_cos, rope_sin, positions, rows, k_caches, v_caches,
                              attend, qkv_attend, pdl=pdl)
            res = gemv(attn, layer.w_o, residual=res, **launch["o"])
            act = gemv(res, layer.w_gate_up, norm=(layer.ln_post, eps), silu_mul=True, **launch["gate_up"])
            res = gemv(act, layer.w_down, residual=res, **launch["down"])
        main.wait_stream(side)
        return res
    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.l2_prefetch")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--budgets-mb", default="0,8,16,24,32,48", help="bytes a layer to prefetch, MB (0: the fork alone)")
    args = p.parse_args(argv)
    import tts_engine.runtime.runner as runner_module
    from bench.stages import prefill_every_slot, stage_fns
    from tts_engine.checkpoint import random_model
    from tts_engine.runtime.runner import ModelRunner

    _, model = random_model("1.7b", torch.bfloat16, torch.device("cuda"))
    runner = ModelRunner(model, max_slots=1, max_context=512, buckets=(1,))
    t_len = 22
    prefill_every_slot(runner, torch.randn(t_len, runner.cfg.hidden_size, device="cuda", dtype=torch.bfloat16))
    plain = runner_module.decoder_step_gemv
    out: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    side = torch.cuda.Stream()
    with torch.inference_mode():
        fns = stage_fns(runner, 1, t_len)
        stages = ("talker_step", "frame_step")
        x = runner.hidden[:1].clone()
        slots, positions = torch.zeros(1, dtype=torch.long, device="cuda"), torch.full((1,), t_len, device="cuda")
        want = runner._talker_decode(slots, x, positions).clone()
        rounds = []
        for r in range(2):  # interleaved: plain, then each budget; twice
            row = {f"{s}_plain_ms": cuda_time_ms(graph_of(fns[s])) for s in stages}
            for mb in (float(v) for v in args.budgets_mb.split(",")):
                runner_module.decoder_step_gemv = patched_step(int(mb * (1 << 20)), side)
                try:
                    got = runner._talker_decode(slots, x, positions)
                    row[f"max_diff_{mb:g}mb"] = float((got.float() - want.float()).abs().max())
                    for s in stages:
                        row[f"{s}_{mb:g}mb_ms"] = cuda_time_ms(graph_of(fns[s]))
                except Exception as exc:  # an experiment: report, do not lose the rest
                    row[f"error_{mb:g}mb"] = f"{type(exc).__name__}: {exc}"[:300]
                finally:
                    runner_module.decoder_step_gemv = plain
            print(f"round {r}: {row}", flush=True)
            rounds.append(row)
        out["rounds"] = rounds
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
