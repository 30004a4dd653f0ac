"""Where a codec call's device time goes, by kernel, and what its residual units' dilated convs cost laid out
channels-first (as served) or channels-last: the numbers a codec kernel change starts from.

    python -m bench.codec_profile --model /tmp/ckpt --out codec-profile.json [--layouts] [--ab codec_rope_kv]

Per shape (batch x frames after 30 frames of state, the codec as the server runs it: `served_codec`, bf16, its
fast path, launched eagerly; a graph replays the same kernels): the graph replay time (CUDA events) and every
kernel's summed duration (torch.profiler's kernel records, exact; no annotation spans, which include launch gaps),
grouped by the decoder part whose op launched it (Triton's launches are missing from them: graph replay less the
kernel sum is about their time). With --layouts, per decoder block at the largest shape, one k7 dilated
conv's input-to-output time four ways (CUDA events): cuDNN conv1d on [B, C, T] (served), cuDNN conv2d on
channels-last [B, C, 1, T], one GEMM over channels-last columns (the copy included), and seven accumulated GEMMs
over channels-last shifted views (no copy).
"""

from __future__ import annotations

import argparse
import copy
import json
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPES = ((1, 1), (8, 2), (32, 2), (32, 12))


def top_parts(codec) -> dict[str, torch.nn.Module]:
    """part name -> module: the pieces of `CodecDecoder._decode`, a decoder block's residual units apart."""
    named = {"quantizer": codec.quantizer, "pre_conv": codec.pre_conv, "pre_transformer": codec.pre_transformer}
    named |= {f"upsample.{i}": m for i, m in enumerate(codec.upsample)}
    for i, block in enumerate(codec.decoder):
        inner = getattr(block, "block", None)
        if inner is None:
            named[f"decoder.{i}"] = block
            continue
        named[f"decoder.{i}.snake"], named[f"decoder.{i}.transpose"] = inner[0], inner[1]
        for j, unit in enumerate(inner[2:]):
            named[f"decoder.{i}.res{j}"] = unit
    return named


def profile_shape(codec, b: int, t: int, reps: int) -> dict:
    from bench.cuda_timing import cuda_time_ms, graph_of
    from bench.stage_times import incremental_chunk

    run = incremental_chunk(codec, b, t)
    replay_ms = cuda_time_ms(graph_of(run))
    spans, hooks = [], []
    for name, module in top_parts(codec).items():
        def pre(_m, _a, name=name):
            spans.append(torch.profiler.record_function(f"part:{name}"))
            spans[-1].__enter__()
        hooks += [module.register_forward_pre_hook(pre),
                  module.register_forward_hook(lambda _m, _a, _o: spans.pop().__exit__(None, None, None))]
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(reps):
            run()
        torch.cuda.synchronize()
    for h in hooks:
        h.remove()
    by_part: dict[str, float] = defaultdict(float)
    by_kernel: dict[str, float] = defaultdict(float)
    launches: dict[str, int] = defaultdict(int)
    for evt in prof.events():
        kernels = getattr(evt, "kernels", [])
        if not kernels:
            continue
        # An op's kernels belong to the innermost part span around the op (kernel durations only: a span's
        # own device time would count the gaps between its launches)
        part, up = "(outside parts)", evt.cpu_parent
        while up is not None and not up.name.startswith("part:"):
            up = up.cpu_parent
        if up is not None:
            part = up.name[5:]
        for k in kernels:
            by_kernel[k.name[:100]] += k.duration / reps
            launches[k.name[:100]] += 1
            by_part[part] += k.duration / reps
    return {"batch": b, "frames": t, "graph_replay_ms": replay_ms, "kernel_us": sum(by_part.values()),
            "top_kernels": [{"kernel": k, "us": v, "launches": launches[k] // reps}
                            for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1])[:30]],
            "by_part_us": dict(sorted(by_part.items(), key=lambda kv: -kv[1]))}


def conv_variants(conv, b: int, positions: int, device: str = "cuda") -> tuple[torch.Tensor, dict]:
    """One k7 dilated conv over b rows of `positions` outputs (its history before them): the channels-first input
    [B, C, n + T] and {name: a callable giving the conv's output}, the outputs channels-first [B, C, T] or
    channels-last [B, T, C] (`as_ncw` turns either into the first)."""
    c, k, d = conv.in_channels, conv.kernel_size[0], conv.dilation[0]
    n = (k - 1) * d
    w = conv.weight  # [C, C, k]
    x = torch.randn(b, c, n + positions, device=device, dtype=w.dtype)
    x_cl = x.transpose(1, 2).contiguous()  # [B, n + T, C]
    x4 = x[:, :, None].contiguous(memory_format=torch.channels_last)
    w4 = w[:, :, None].contiguous(memory_format=torch.channels_last)
    w_cols = w.permute(0, 2, 1).reshape(c, k * c).t().contiguous()  # [(j, c_in), c_out]
    w_taps = [w[:, :, j].t().contiguous().expand(b, c, c) for j in range(k)]  # [B, c_in, c_out]

    def cols():
        windows = x_cl.unfold(1, n + 1, 1)[..., ::d]  # [B, T, C, k]
        return (windows.transpose(2, 3).reshape(b * positions, k * c) @ w_cols).view(b, positions, c)

    def taps():
        out = torch.bmm(x_cl[:, :positions], w_taps[0])
        for j in range(1, k):
            out.baddbmm_(x_cl[:, j * d:j * d + positions], w_taps[j])
        return out

    return x, {"conv1d_ncw": lambda: F.conv1d(x, w, dilation=d),
               "conv2d_nhwc": lambda: F.conv2d(x4, w4, dilation=(1, d))[:, :, 0],
               "columns_cl": cols, "taps_cl": taps}


def as_ncw(y: torch.Tensor, channels: int) -> torch.Tensor:
    return y if y.shape[1] == channels else y.transpose(1, 2)


def time_variants(conv, b: int, positions: int) -> dict:
    from bench.cuda_timing import cuda_time_ms

    _, variants = conv_variants(conv, b, positions)
    ref = variants["conv1d_ncw"]().float()
    row = {"channels": conv.in_channels, "dilation": conv.dilation[0], "positions": positions, "batch": b}
    for name, fn in variants.items():
        out = as_ncw(fn(), conv.in_channels).float()
        row[f"{name}_ms"] = cuda_time_ms(fn)
        row[f"{name}_rel_err"] = float((out - ref).abs().max() / ref.abs().max())
    return row


def conv_layouts(codec, b: int, t: int) -> list[dict]:
    """One residual unit's k7 conv (dilation 1 and 9) per decoder block, at b streams x t frames."""
    rows = []
    positions = t * 4  # after the two x2 upsample stages
    for block in codec.decoder[1:5]:
        positions *= block.block[1].stride
        for unit in (block.block[2], block.block[4]):
            rows.append(time_variants(unit.conv1.conv, b, positions))
            print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    return rows


def ab_times(reference, shapes, names: list[str]) -> dict:
    """{variant: {"BxT": graph replay ms, "snr_db_vs_fp32": dB}} for the defaults and, in the same process, with
    each named codec option of `FastPathOptions` off; `reference`: the fp32 codec (its exact decode, TF32 off)."""
    from bench.cuda_timing import cuda_time_ms, graph_of
    from bench.stage_times import incremental_chunk, pcm_snr_db
    from tts_engine.runtime.codec_runner import served_codec
    from tts_engine.runtime.options import FastPathOptions

    probe = torch.randint(0, 2048, (2, 16, 24), generator=torch.Generator().manual_seed(0)).cuda()
    exact = reference.decode_chunk(probe, reference.new_state(2))[0].float()
    out: dict = {}
    for name in ("defaults", *names):
        options = FastPathOptions(**({} if name == "defaults" else {name: False}))
        served, _ = served_codec(copy.deepcopy(reference), True, None, options)
        row = {"snr_db_vs_fp32": pcm_snr_db(served, probe, exact)}
        for b, t in shapes:
            row[f"{b}x{t}"] = cuda_time_ms(graph_of(incremental_chunk(served, b, t)))
        key = name if name == "defaults" else f"{name}=False"
        out[key] = row
        print(key, {k: round(v, 3) for k, v in row.items()}, flush=True)
        del served
        torch.cuda.empty_cache()
    return out


def ab_names(text: str) -> list[str]:
    """--ab's comma-separated codec options, each a boolean field of FastPathOptions."""
    from tts_engine.runtime.options import FastPathOptions

    names = [n for n in text.split(",") if n]
    for n in names:
        if not n.startswith("codec_") or not isinstance(getattr(FastPathOptions(), n, None), bool):
            raise SystemExit(f"--ab: {n!r} is not a boolean codec option of FastPathOptions")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.codec_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--layouts", action="store_true", help="also time one dilated conv per block four ways")
    p.add_argument("--shapes", default=",".join(f"{b}x{t}" for b, t in SHAPES), help="BATCHxFRAMES,...")
    p.add_argument("--ab", default="", help="codec options (FastPathOptions' boolean codec_* fields) to time off, "
                   "each against the defaults in this process: graph replay per shape and PCM SNR against fp32")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    names = ab_names(args.ab)
    from tts_engine.loading import load_checkpoint
    from tts_engine.runtime.codec_runner import cuda_numerics, served_codec

    ckpt = load_checkpoint(args.model, device=torch.device("cuda"), dtype=torch.bfloat16)
    codec, _ = served_codec(copy.deepcopy(ckpt.codec.eval()), True, None)
    results, layouts, ab = [], [], None
    with torch.inference_mode(), cuda_numerics(False):
        if names:
            ab = ab_times(ckpt.codec.eval(), shapes, names)
        del ckpt
        for b, t in shapes:
            r = profile_shape(codec, b, t, args.reps)
            results.append(r)
            print(f"\n## batch {b} x {t} frames: graph replay {r['graph_replay_ms']:.3f} ms, "
                  f"kernels {r['kernel_us'] / 1e3:.3f} ms", flush=True)
            for k in r["top_kernels"][:20]:
                print(f"  {k['us']:9.1f} us  x{k['launches']:<3d} {k['kernel']}")
        if args.layouts:
            layouts = conv_layouts(codec, *shapes[-1])
    args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "ab": ab, "shapes": results,
                                    "conv_layouts": layouts}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
