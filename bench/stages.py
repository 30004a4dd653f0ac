"""Issue 3's stage table on one GPU, in one process, printed as markdown and written as JSON:

    python -m bench.stages --model /tmp/ckpt-1.7b --make --out stages.json

Rows: the talker step (short and long context), the code-predictor frame, the frame step and the codec's
chunks at each batch (bench/stage_times.py); the copy floor; one prompt's prefill; the plain reference loop;
and request-to-first-PCM over a real socket against `cadence serve` (bench/socket_latency.py). Everything
runs at the engine's defaults (FastPathOptions()); a benchmark that wants another setting builds its runner
with other options in code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

BATCHES = (1, 8, 32, 64)
STAGE_ROWS = (("talker step (11 positions)", "talker_step_ms"), ("talker step (448 positions)", "talker_step_long_ms"),
              ("code-predictor frame", "code_predictor_frame_ms"), ("frame step", "frame_step_ms"))
CODEC_ROWS = (("codec, 1-frame chunk", "chunk_1f_ms"), ("codec, 2-frame chunk", "chunk_2f_ms"),
              ("codec, 12-frame chunk", "chunk_12f_ms"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.stages", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="the checkpoint directory")
    p.add_argument("--make", action="store_true", help="write a random-weight checkpoint there first if missing")
    p.add_argument("--size", default="1.7b", choices=["0.6b", "1.7b"], help="with --make")
    p.add_argument("--out", type=Path, required=True, help="the JSON results")
    p.add_argument("--batches", default=",".join(map(str, BATCHES)), help="comma-separated batch sizes")
    p.add_argument("--requests", type=int, default=100, help="sequential socket requests (0: none)")
    p.add_argument("--skip-reference", action="store_true", help="no plain reference loop (~1 min)")
    return p


def parse_batches(text: str) -> tuple[int, ...]:
    try:
        batches = tuple(int(b) for b in text.split(","))
    except ValueError:
        raise ValueError(f"--batches must be comma-separated integers, got {text!r}") from None
    if not batches or any(not 1 <= b <= 64 for b in batches):
        raise ValueError(f"--batches must be in 1..64, got {text!r}")
    return batches


def table(result: dict) -> str:
    """The stage rows by batch as a markdown table, then one line for each other figure present."""
    batches = sorted(result["stages"], key=int)
    lines = ["| | " + " | ".join(f"batch {b}" for b in batches) + " |", "|---" * (len(batches) + 1) + "|"]
    for label, key in STAGE_ROWS:
        lines.append(f"| {label} | " + " | ".join(f"{result['stages'][b][key]:.3f}" for b in batches) + " |")
    for label, key in CODEC_ROWS:
        lines.append(f"| {label} | " + " | ".join(f"{result['codec'][b][key]:.3f}" for b in batches) + " |")
    f = result["floors"]
    lines += ["", f"copy floor: {f['copy_bandwidth_tbs']:.2f} TB/s; weights at batch 1: talker step "
                  f"{f['floor_talker_step_ms']:.3f} ms, code-predictor frame "
                  f"{f['floor_code_predictor_frame_ms']:.3f} ms",
              "prefill (graph): " + " / ".join(f"{v:.2f}" for v in result["prefill"].values()) + " ms at "
              + " / ".join(k.split("_")[1] for k in result["prefill"]) + " rows",
              f"codec: bf16 fast path, {result['codec']['snr_db_vs_fp32']:.1f} dB SNR against exact fp32"]
    if "reference_ms_per_frame" in result:
        lines.append(f"plain reference loop: {result['reference_ms_per_frame']:.1f} ms a frame")
    if "socket" in result:
        s = result["socket"]
        lines.append(f"socket first PCM ({s['requests']} sequential requests): p50 {s['first_pcm_ms_p50']:.2f} ms, "
                     f"p95 {s['first_pcm_ms_p95']:.2f}, max {s['first_pcm_ms_max']:.2f}")
    return "\n".join(lines)


def run(args) -> dict:
    import torch

    from bench.socket_latency import corpus, socket_first_pcm
    from bench.stage_times import codec_times, floors, prefill_times, reference_ms_per_frame, stage_times
    from tts_engine.checkpoint import make_checkpoint
    from tts_engine.loading import load_checkpoint
    from tts_engine.runtime.runner import ModelRunner

    batches = parse_batches(args.batches)
    if not torch.cuda.is_available():
        raise ValueError("bench.stages needs a CUDA device")
    if args.make and not (args.model / "model.safetensors").exists():
        make_checkpoint(args.size, args.model, device="cuda")
    if not args.model.is_dir():
        raise FileNotFoundError(f"checkpoint directory {args.model} does not exist (--make writes one)")
    result: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "python": platform.python_version(), "commit": os.environ.get("CADENCE_COMMIT", "unknown")}
    ckpt = load_checkpoint(args.model, device=torch.device("cuda"), dtype=torch.bfloat16)
    model = ckpt.model.eval()
    result["floors"] = floors(model)
    runner = ModelRunner(model, max_slots=max(batches), max_context=512)
    result["stages"] = stage_times(runner, batches)
    result["prefill"] = prefill_times(runner)
    del runner
    torch.cuda.empty_cache()
    result["codec"] = codec_times(ckpt.codec.eval(), batches)
    if not args.skip_reference:
        result["reference_ms_per_frame"] = reference_ms_per_frame(model, ckpt.cfg)
    del model, ckpt
    torch.cuda.empty_cache()
    if args.requests:
        result["socket"] = socket_first_pcm(args.model, args.requests, corpus())
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"bench.stages: error: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
