"""Single-GPU latency benchmark: per-stage GPU times, the bandwidth floor, the plain reference loop,
and request-to-first-PCM over a real socket.

    python -m bench.latency --model /tmp/ckpt-1.7b --make --out bench/results/latency.json

Stage times are medians of CUDA-event-timed graph replays (warm-up first), for each runner mode
(`triton`: the Triton kernels; `torch`: the plain-torch reference path); the code predictor and
the frame step use the sampler variant the default settings get (FAST; the triton mode has one fused
sampler for every setting), the frame step also the GENERAL one. Prefill: one prompt, eager and
through its bucket's captured graph. `talker_step_long_ms` reads a context of max_context - 64
positions. `host`: the CPU time of queuing a new stream's work (prompt embedding, prefill, sampling
settings, frame steps at batch 1 and 8 through captured graphs), the engine thread's share before the
GPU has it. The socket figure (bench/socket_latency.py) runs `cadence serve` in a subprocess and
times, per sequential request, from just before the request is written to the arrival of the first
PCM byte of the response body.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

from bench.codec_stages import codec_precision_times, codec_profile, codec_times, window_of
from bench.cuda_timing import cuda_time_ms
from bench.latency_stages import pdl_launch_from, stage_times
from bench.socket_latency import corpus, socket_first_pcm, socket_requests
from bench.stages import prefill_every_slot, prompt_ids
from tts_engine.runtime.options import MAX_PREFILL_MMA_ROWS

BATCHES = (1, 8, 16, 32, 64)


def bandwidth_tbs(gib: int = 4) -> float:
    n = gib * (1 << 30) // 2
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    ms = cuda_time_ms(lambda: b.copy_(a), warmup=3, reps=10)
    return 2 * a.numel() * 2 / (ms * 1e-3) / 1e12


def prefill_times(runner, lengths=(12, 40, 120)) -> dict:
    """One prompt's embedding and prefill at batch 1 (slot 0), eager and through its captured bucket
    graph (`prefill_prompt`: the embedding inside it); on the Triton path also with the talker's
    products on the tensor-core GEMV ("_mma": `prefill_mma_rows` 64) for the lengths it takes. Leaves
    the runner's prefill graphs those of the last setting timed."""
    out = {}
    variants = [("", runner.prefill_mma_rows)]
    if runner.use_triton and not runner.prefill_mma_rows:
        variants.append(("_mma", MAX_PREFILL_MMA_ROWS))
    configured = runner.prefill_mma_rows
    with torch.inference_mode():
        for suffix, mma_rows in variants:
            runner.prefill_mma_rows = mma_rows
            runner.capture_prefill_graphs()  # captured with this setting
            graphs = runner.prefill_graphs
            for t_len in lengths:
                if suffix and t_len > mma_rows:
                    continue
                prefill = partial(runner.prefill_prompt, 0, *prompt_ids(t_len))
                runner.prefill_graphs = {}
                out[f"prefill_{t_len}_eager{suffix}_ms"] = cuda_time_ms(prefill)
                runner.prefill_graphs = graphs
                out[f"prefill_{t_len}_graph{suffix}_ms"] = cuda_time_ms(prefill)
    runner.prefill_mma_rows = configured
    print(f"prefill: {out}", flush=True)
    return out


def host_times(runner, reps: int = 50) -> dict:
    """The engine thread's CPU cost of queuing a new stream's work (µs, median of `reps`): the prompt's
    embedding and prefill (one graph; the eager embedding beside it, what it cost before), the slot's
    sampling settings, and frame steps at batch 1 and 8, through the runner's captured graphs where it
    has them. Only the call is timed: the device is synchronised between repetitions, so no call waits
    for earlier work. At batch 1 these run before (or beside) the GPU's first work for a stream."""
    from tts_engine.sampling import SamplingParams

    sync = torch.cuda.synchronize if runner.device.type == "cuda" else (lambda: None)
    text_ids, codec_ids = prompt_ids(22)

    def timed(fn) -> float:
        times = []
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        sync()
        return statistics.median(times) * 1e6

    t = len(text_ids)
    b8 = list(range(min(8, runner.max_slots)))
    out = {"prompt_rows": len(text_ids), "graphs": bool(runner.graphs),
           "prefill_prompt_us": timed(lambda: runner.prefill_prompt(0, text_ids, codec_ids)),
           "embed_prompt_eager_us": timed(lambda: runner.embed_prompt(text_ids, codec_ids)),
           "start_slot_us": timed(lambda: runner.start_slot(0, SamplingParams(), 0, eos_allowed=True)),
           "frame_step_b1_us": timed(lambda: runner.frame_step_async([0], [5], [t], [0])),
           f"frame_step_b{len(b8)}_us": timed(lambda: runner.frame_step_async(b8, [5] * len(b8), [t] * len(b8),
                                                                          [0] * len(b8)))}
    print(f"host: {out}", flush=True)
    return out


def reference_loop_ms_per_frame(model, cfg, frames: int = 8) -> float:
    from tts_engine.prompt import Layout, VoiceSpec, build_prompt
    from tts_engine.reference import GenerationInput, generate_codes
    from tts_engine.sampling import SamplingParams

    prompt = build_prompt(cfg, [151644, 77091, 198, *range(1000, 1012), 151645, 198, 151644, 77091, 198],
                          VoiceSpec("ryan", "english"), Layout.NON_STREAMING)
    inp = GenerationInput(prompt, SamplingParams(seed=1), 1, frames)
    generate_codes(model, [inp])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    generate_codes(model, [inp])
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / frames


def build_parser(experiments) -> argparse.ArgumentParser:
    """bench.latency's arguments; `experiments`: the names --experiments takes."""
    p = argparse.ArgumentParser(prog="bench.latency")
    p.add_argument("--model", type=Path, help="the checkpoint (required unless --socket-port)")
    p.add_argument("--socket-port", type=int,
                   help="only the socket measurement, against the `cadence serve` already on 127.0.0.1:PORT")
    p.add_argument("--size", default="1.7b")
    p.add_argument("--make", action="store_true", help="write a random-weight checkpoint first if missing")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--skip-socket", action="store_true")
    p.add_argument("--skip-codec", action="store_true")
    p.add_argument("--codec-variants", default="",
                   help="comma-separated codec_stages variants to time instead of all (e.g. "
                        "bf16+fused+cudnn-window,bf16+fused+window=N,...#2 to repeat one), and the "
                        "bf16 fast path profiled with the dense convs on cuDNN and as window GEMMs")
    p.add_argument("--skip-codec-eager", action="store_true", help="only the codec's graph times per precision")
    p.add_argument("--skip-stages", action="store_true", help="no stage, prefill or reference-loop times")
    p.add_argument("--socket-args", action="append", default=[],
                   help="`cadence serve` arguments of one more socket run (repeatable), e.g. '--codec-stream'")
    p.add_argument("--modes", default="triton,torch", help="runner modes to time: triton, torch or both")
    p.add_argument("--batches", default=",".join(map(str, BATCHES)),
                   help="stage timings at these batch sizes (comma-separated; the issue's table needs 1,8,32,64)")
    p.add_argument("--skip-reference", action="store_true", help="no plain reference loop (fp32, ~1 min)")
    p.add_argument("--draw", metavar="WARPS,WINDOW[,WAYS]", help="every draw's launch (bench.sample_kernel's `best`)")
    p.add_argument("--talker-launch-from", type=Path,
                   help="a `bench.kernels --gemv-sweep --shapes talker` JSON: the talker's GEMVs run with its "
                        "fastest configurations at 1 row instead of talker_launch.TALKER_GEMV_LAUNCH")
    p.add_argument("--pdl-launch-from", type=Path,
                   help="a `bench.step_sweep` JSON: the batch-1 PDL steps run with its best tables (the talker's "
                        "runner.talker_pdl_launch, the code predictor's cp_launch.PDL_LAUNCH) instead of the "
                        "defaults")
    p.add_argument("--experiments", help=f"comma-separated batch-1 experiments ({', '.join(experiments)}) to run "
                                         "instead of the stage and prefill times")
    return p


def weight_floors(model, bandwidth_tbs: float) -> dict:
    """The batch-1 floors of issue 3's table: the bytes of weights a talker step and a code-predictor frame must read
    (bf16), at the measured copy bandwidth -> {"floor_talker_step_ms", "floor_code_predictor_frame_ms"}."""
    state = model.state_dict()
    talker_bytes = sum(t.numel() * 2 for n, t in state.items()
                       if n.startswith("talker.model.layers") or n in ("talker.codec_head.weight",
                                                                      "talker.model.norm.weight"))
    cp_layer_bytes = sum(t.numel() * 2 for n, t in state.items() if n.startswith("talker.code_predictor.model.layers"))
    cp_head_bytes = sum(t.numel() * 2 for n, t in state.items() if "lm_head" in n)
    bw = bandwidth_tbs * 1e12
    # 15 passes through the predictor's layers per frame, and each of the 15 heads once.
    return {"floor_talker_step_ms": talker_bytes / bw * 1e3,
            "floor_code_predictor_frame_ms": (15 * cp_layer_bytes + cp_head_bytes) / bw * 1e3}


def codec_part(args) -> dict:
    """The codec's share of the table: its graph times per precision (and eager ones unless --skip-codec-eager) and
    profiles of the calls a loaded server makes, on the checkpoint's speech tokenizer."""
    from tts_engine.config import CodecConfig
    from tts_engine.model.codec import CodecDecoder
    from tts_engine.weights import load_into, safetensors_files

    result = {}
    with torch.device("meta"):
        codec = CodecDecoder(CodecConfig.from_file(args.model / "speech_tokenizer" / "config.json").decoder)
    codec = load_into(codec, safetensors_files(args.model / "speech_tokenizer"), prefix="decoder.",
                      ignore_prefixes=("encoder.",), device="cuda").eval()
    if not args.skip_codec_eager:
        result["codec"] = codec_times(codec, (1, 8, 32, 64))
    variants = tuple(args.codec_variants.split(",")) if args.codec_variants else None
    result["codec_precision"] = codec_precision_times(codec, names=variants)
    # The calls a loaded server makes: the codec tick's 2-frame chunks of many streams, and first
    # chunks of one frame; 12 frames as run 7 profiled them.
    for window in ("cudnn-window", "window-convs") if variants else ("",):
        for b, t in ((8, 2), (1, 1)) if variants else ((8, 2), (1, 1), (8, 12)):
            key = f"codec_profile_b{b}_{t}f_bf16_fused" + ("_" + window.replace("-", "_") if window else "")
            result[key] = codec_profile(codec, b, t, **window_of(window))
            print(key, json.dumps(result[key][:12], indent=1), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    from bench.latency_experiments import EXPERIMENTS  # it times through this module's stages

    p = build_parser(EXPERIMENTS)
    args = p.parse_args(argv)
    unknown = set(filter(None, (args.experiments or "").split(","))) - set(EXPERIMENTS)
    if unknown:
        p.error(f"--experiments: unknown {', '.join(sorted(unknown))} (known: {', '.join(EXPERIMENTS)})")
    if args.socket_port is not None:
        result = {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                  "commit": os.environ.get("CADENCE_COMMIT", "unknown"),
                  "socket": socket_requests(args.socket_port, args.requests, corpus())}
        print(f"socket: {result['socket']}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        return 0
    if args.model is None:
        p.error("--model is required (or --socket-port)")
    from tts_engine.checkpoint import make_checkpoint
    from tts_engine.config import ModelConfig
    from tts_engine.model.qwen3_tts import Qwen3TTS
    from tts_engine.runtime.runner import ModelRunner
    from tts_engine.weights import load_into, safetensors_files

    if args.make and not (args.model / "model.safetensors").exists():
        t0 = time.time()
        make_checkpoint(args.size, args.model, device="cuda")
        print(f"checkpoint written in {time.time() - t0:.0f} s", flush=True)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
              "commit": os.environ.get("CADENCE_COMMIT", "unknown"), "model": args.size}
    from bench.sample_kernel import set_draw

    result["draw"] = set_draw(args.draw)
    result["copy_bandwidth_tbs"] = bandwidth_tbs()
    cfg = ModelConfig.from_file(args.model / "config.json")
    with torch.device("meta"):
        model = Qwen3TTS(cfg)
    model = load_into(model, safetensors_files(args.model), dtype=torch.bfloat16, device="cuda").eval()
    result.update(weight_floors(model, result["copy_bandwidth_tbs"]))
    batches = tuple(int(b) for b in args.batches.split(","))
    if not (args.skip_stages or args.skip_reference):
        result["reference_loop_ms_per_frame"] = reference_loop_ms_per_frame(model, cfg)
        print(f"reference loop: {result['reference_loop_ms_per_frame']:.1f} ms/frame", flush=True)
    for mode in args.modes.split(",") if not args.skip_stages else ():
        if mode not in ("triton", "torch"):
            raise ValueError(f"--modes: unknown mode {mode!r} (triton, torch)")
        runner = ModelRunner(model, max_slots=max(batches), max_context=512, use_triton=mode == "triton")
        # which draw the code predictor's frames run (FastPathOptions.cp_cuda_draw: the CUDA one where nvcc is)
        result[f"cp_cuda_draw_{mode}"] = runner.code_predictor.draw_kernel is not None
        result[f"cp_cuda_gemv_{mode}"] = runner.code_predictor.gemv_kernel is not None
        result[f"cp_rows_pdl_{mode}"] = runner.code_predictor.pass_pdl(32)
        result[f"cp_rows_norms_{mode}"] = runner.code_predictor.norm_rows(32)
        if args.talker_launch_from is not None:
            from bench.kernels import best_launch

            runner.talker_launch = best_launch(json.loads(args.talker_launch_from.read_text())["gemv_sweep"],
                                               "talker", 1)
            result["talker_launch"] = runner.talker_launch
            print(f"talker GEMV launch: {runner.talker_launch}", flush=True)
        if args.pdl_launch_from is not None:
            result["pdl_launch"] = pdl_launch_from(runner, json.loads(args.pdl_launch_from.read_text()))
            print(f"PDL launch tables: {result['pdl_launch']}", flush=True)
        prompt = runner.embed_prompt([151644, 77091, 198] + [151671] * 6 + [151672, 1000],
                                     [None] * 3 + [2154, 2156, 2050, 2157, 3061, 2148, 2149])
        if args.experiments:
            prefill_every_slot(runner, prompt)
            with torch.inference_mode():
                result[f"experiments_{mode}"] = {name: EXPERIMENTS[name](runner, prompt.shape[0])
                                                 for name in args.experiments.split(",")}
            del runner
            continue
        print(f"stages, {mode} mode", flush=True)
        result["stages" if mode == "triton" else f"stages_{mode}"] = stage_times(runner, prompt, batches)
        result["prefill" if mode == "triton" else f"prefill_{mode}"] = prefill_times(runner)
        del runner
        if mode == "triton":  # the host's share, on a runner with two captured buckets
            runner = ModelRunner(model, max_slots=8, max_context=512, buckets=(1, 8))
            runner.capture_graphs()
            result["host"] = host_times(runner)
            del runner
        torch.cuda.empty_cache()
    if not args.skip_codec:
        result.update(codec_part(args))
    del model
    torch.cuda.empty_cache()
    if not args.skip_socket:
        texts = corpus()
        result["socket"] = socket_first_pcm(args.model, args.requests, texts)
        print(f"socket: {result['socket']}", flush=True)
        for i, extra in enumerate(args.socket_args):
            result[f"socket_{i + 1}"] = socket_first_pcm(args.model, args.requests, texts, tuple(extra.split()))
            print(f"socket {extra}: {result[f'socket_{i + 1}']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
