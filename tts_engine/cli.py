"""`cadence` console command.

Every user error (bad argument, unknown voice or language, missing model directory) ends in one
line on stderr and exit status 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import wave
from dataclasses import replace
from pathlib import Path

import numpy as np


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_make_checkpoint(sub) -> None:
    p = sub.add_parser("make-checkpoint", help="write a random-weight checkpoint in the official layout")
    p.add_argument("--size", required=True, choices=["tiny", "0.6b", "1.7b"])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variant", choices=["custom-voice", "voice-design"], default="custom-voice")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default=None,
                   help="talker weights dtype (default: fp32 for tiny, bf16 otherwise)")
    p.add_argument("--device", default="cpu", help="where to draw the random tensors (e.g. cuda)")
    p.add_argument("--chars-per-second", type=float, default=None,
                   help="speaking rate that sets the length of random-weight output (default 14.5)")
    p.set_defaults(func=_make_checkpoint)


def _add_say(sub) -> None:
    p = sub.add_parser("say", help="synthesise text to a WAV file (reference path)")
    p.add_argument("text", nargs="?", default=None, help="text to speak; omit or '-' to read stdin")
    p.add_argument("--model", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--voice", default=None, help="built-in voice (CustomVoice models)")
    p.add_argument("--language", default="auto")
    p.add_argument("--instruct", default=None, help="style instruction (required for VoiceDesign)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--layout", choices=["non-streaming", "streaming"], default="non-streaming")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--greedy", action="store_true", help="argmax decoding instead of sampling")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--max-frames", type=int, default=None, help="stop after this many 80 ms frames")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_say)


def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="run the streaming HTTP/WebSocket server (docs/streaming-api.md)")
    p.add_argument("--model", required=True, type=Path, help="checkpoint directory")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--max-active-streams", type=int, default=None, help="engine admission cap")
    p.add_argument("--max-queued-streams", type=int, default=None, help="engine admission cap")
    p.add_argument("--underrun-admission", choices=["auto", "on", "off"], default="auto",
                   help="refuse streams whose admission the cost model predicts would make streams underrun "
                        "(auto: on with CUDA)")
    p.add_argument("--realtime-margin", type=float, default=None,
                   help="admission keeps the predicted cycle under 80 ms / this (default 1.25)")
    p.add_argument("--codec-stream", action="store_true",
                   help="decode codec chunks on a CUDA stream of their own, beside the frame steps "
                        "(experimental; CUDA only)")
    p.add_argument("--newcomer-lane", action="store_true",
                   help="a stream that arrives while others decode runs its prefill, first frames and first chunk "
                        "on a high-priority CUDA stream of its own with batch-1 graphs, beside the steps in flight "
                        "(experimental)")
    p.add_argument("--prefill-stream", action=argparse.BooleanOptionalAction, default=None,
                   help="run new streams' prefills on a high-priority CUDA stream of their own, beside the "
                        "steps in flight (default: on with CUDA; run 13: p95 first audio -2.0 ms at 40 req/s)")
    p.add_argument("--gc-freeze", action=argparse.BooleanOptionalAction, default=True,
                   help="after warm-up, exempt everything then alive from Python's cyclic garbage collector, "
                        "whose full collections otherwise pause the engine for ~0.1-0.2 s (engine/gcpause.py)")
    p.add_argument("--gil-switch-ms", type=float, default=0.5,
                   help="Python's thread switch interval (sys.setswitchinterval; its own default is 5 ms): how long "
                        "the engine thread can wait for the GIL while the HTTP/WebSocket thread runs Python")
    p.add_argument("--cpu-wake-latency-us", type=int, default=None, metavar="US",
                   help="while serving, hold a Linux PM QoS request (/dev/cpu_dma_latency, needs root) that keeps "
                        "idle CPUs out of idle states slower than US to leave (0: idle CPUs poll); every thread "
                        "handoff on the way to first audio then wakes faster, for more power drawn while idle "
                        "(server/cpu_wake.py; default: not held)")
    p.add_argument("--profile-engine", type=Path, default=None, metavar="PATH",
                   help="write a cProfile of the engine thread's first --profile-seconds of work to PATH, and "
                        "its sampled stacks to PATH.stacks and PATH.top.txt (diagnosis only: profiling slows "
                        "the engine)")
    p.add_argument("--profile-seconds", type=float, default=30.0)
    p.add_argument("--codec-precision", choices=["fp32", "tf32", "bf16"], default=None,
                   help="codec numerics: fp32 exact, tf32 (fp32 weights, tensor-core convs) or bf16 "
                        "(default: bf16 on CUDA, as the official package runs it in bf16; fp32 on CPU)")
    p.add_argument("--codec-window-max", type=int, default=None, metavar="ELEMENTS",
                   help="CUDA: the codec's dense convs as GEMMs over their input windows while those hold at "
                        "most this many elements, cuDNN past it; 0: cuDNN always (default 16777216: a stream's "
                        "first one-frame chunk 1.34 -> 1.02 ms on the H200, run 18)")
    p.add_argument("--codec-rope-kv", action=argparse.BooleanOptionalAction, default=None,
                   help="CUDA: the codec window transformer's RoPE and K/V window as one kernel a layer instead of "
                        "nine torch ops (default on: a stream's first one-frame chunk 1.02 -> 0.89 ms on the H200, "
                        "run 19)")
    p.add_argument("--codec-conv-windows", action=argparse.BooleanOptionalAction, default=None,
                   help="CUDA: each streaming codec conv's concatenation, history shift and window columns as one "
                        "kernel instead of two or three copies (default on: first one-frame chunk 0.86 -> 0.78 ms, "
                        "batch 32 x 12 frames 14.5 -> 12.2 on the H200, run 19)")
    p.add_argument("--codec-tick-yields-to-prefill", action=argparse.BooleanOptionalAction, default=True,
                   help="a codec tick step that would hold a prefill moves to the next step, so the new stream's "
                        "first frames are not queued behind the tick's codec calls (default on: run 12 measured "
                        "p95 first audio -1.5 / -5.3 ms at 10 / 40 req/s)")
    p.add_argument("--codec-tick", type=int, default=None,
                   help="after a stream's first chunk, decode its audio every N engine steps so that streams "
                        "share codec calls (0: each stream on its own chunk schedule; default 2 on CUDA, 0 on CPU)")
    # The fast path's kernel choices (runtime/options.py; None: its defaults).
    p.add_argument("--talker-gemv-rows", type=int, default=None,
                   help="talker decode steps of up to this many rows run their products through the fused "
                        "small-batch GEMV instead of cuBLAS (0: never; default 1; at most 4; CUDA)")
    p.add_argument("--cp-gemv-rows", type=int, default=None,
                   help="code-predictor passes of up to this many token rows run their products through the fused "
                        "small-batch GEMV instead of cuBLAS (0: never; default 2; at most 4, past which cuBLAS is "
                        "faster; CUDA)")
    p.add_argument("--cp-mma-rows", type=int, default=None,
                   help="code-predictor passes of up to this many token rows (at most 64) past --cp-gemv-rows run on "
                        "the same fused kernels with tensor-core products instead of cuBLAS, with PDL where "
                        "--cp-pdl is (CUDA)")
    p.add_argument("--prefill-mma-rows", type=int, default=None,
                   help="prompts of up to this many rows (at most 64) prefill with the talker's products on the "
                        "fused tensor-core GEMV instead of cuBLAS (default 0: none; CUDA)")
    p.add_argument("--cp-pdl", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's GEMV passes of 1-2 rows with programmatic dependent launch "
                        "(default: on where supported, compiled Triton on sm90+ GPUs)")
    p.add_argument("--talker-pdl", action=argparse.BooleanOptionalAction, default=None,
                   help="the talker's GEMV steps (--talker-gemv-rows) with programmatic dependent launch, every "
                        "kernel of the step (default: on where supported, compiled Triton on sm90+ GPUs)")
    p.add_argument("--cp-fused-attention", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's q/k norm, RoPE and K/V store in its attention kernel, one launch "
                        "(default: on; CUDA)")
    p.add_argument("--cp-qkv-table", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's passes 1-14 read their first layer's qkv product from a table made "
                        "at load (235 MB), gathered by the draw before them: a launch fewer a pass (default: on; "
                        "Triton paths)")
    p.add_argument("--cp-attention-o", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's GEMV passes run each layer's attention and o product as one launch, "
                        "o summed across kv heads in int64 fixed point (default: on; Triton paths)")
    p.add_argument("--cp-early-trigger", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's PDL passes let the next launch start before the wait of each launch "
                        "that may (all but gate/up; in the passes on the CUDA kernel's rows all but qkv), so two "
                        "launches ahead load their weights at once (default: on; sm90+ with --cp-pdl)")
    p.add_argument("--cp-persistent", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's batch-1 passes 1-14 as one persistent CUDA kernel each, built by nvcc "
                        "at load (kernels/cuda/cp_pass.cu; needs an sm90 GPU, nvcc, --cp-pdl and --cp-qkv-table; "
                        "default: off, slower than the Triton passes in run 28)")
    p.add_argument("--cp-cuda-draw", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's draws (codebooks 1-15) as a CUDA kernel built by nvcc at load "
                        "(kernels/cuda/cp_draw.cu); --cp-cuda-draw: required, --no-cp-cuda-draw: the Triton draw "
                        "(default: the CUDA kernel where it can run: an sm90 GPU with nvcc)")
    p.add_argument("--cp-cuda-gemv", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's batch-1 products on the tensor cores as a CUDA kernel built by nvcc at "
                        "load (kernels/cuda/cp_gemv.cu; needs an sm90 GPU, nvcc and --cp-pdl); --cp-cuda-gemv: "
                        "required, --no-cp-cuda-gemv: the Triton GEMVs (default: the CUDA kernel where it can run)")
    p.add_argument("--cp-rows-pdl", action=argparse.BooleanOptionalAction, default=None,
                   help="the code predictor's passes of 3-32 token rows, whose products (qkv, gate/up, o, down, the "
                        "heads) are the CUDA kernel's rows where --cp-cuda-gemv runs, with every launch under PDL "
                        "(default: on; off: the same kernels without PDL)")
    p.add_argument("--cp-rows-norms", action=argparse.BooleanOptionalAction, default=None,
                   help="in those passes the norms inside the products (qkv, gate/up and the heads normalise their "
                        "input, o and down add the residual): 5 launches a layer, not 7 (default: off, slower in run "
                        "33; off: the norms as launches of their own)")
    p.add_argument("--cp-down-splits", type=int, default=None,
                   help="the code predictor's cuBLAS passes (past --cp-gemv-rows) make each down product as this "
                        "many fp32 split-K partials that the next norm sums, not cuBLAS' own split-K product and its "
                        "reduce launch (default 4; 0: cuBLAS'; at most 16, dividing the intermediate size; CUDA)")
    p.add_argument("--cp-o-splits", type=int, default=None,
                   help="the same for the code predictor's o products (default 4; dividing heads x head dim)")
    p.add_argument("--talker-down-splits", type=int, default=None,
                   help="the same for the talker's cuBLAS steps (past --talker-gemv-rows) and its prompts' prefills "
                        "(default 2)")
    p.add_argument("--talker-o-splits", type=int, default=None,
                   help="the same for the talker's o products (default 2)")
    p.add_argument("--talker-qk-attention-context", type=int, default=None,
                   help="the talker's GEMV steps whose rows all attend to at most this many positions run the q/k "
                        "norm, RoPE, K/V store and attention as one launch a layer (default 256; 0: never; CUDA)")
    p.add_argument("--attention-version", type=int, choices=[2, 3], default=None,
                   help="the talker's decode attention kernel: 2 CUDA-core products, 3 tensor-core products "
                        "(default 3; CUDA)")
    p.add_argument("--lookahead-buffer-s", type=float, default=None,
                   help="launch the next step before the running one is read only while some stream has less "
                        "audio than this ahead of its listener, or has none yet (default 0.3)")
    p.add_argument("--always-lookahead", action="store_true",
                   help="launch the next step before the running one is read on every step (CUDA; as before 0.3 s "
                        "became the rule)")
    p.add_argument("--yield-buffer-s", type=float, default=None,
                   help="audio ahead of its listener past which a stream yields when capacity is short (default 1.5)")
    p.add_argument("--first-audio-yield-ms", type=float, default=0.0,
                   help="after a stream's first audio the engine thread hands it to the server's event loop at "
                        "once and sleeps this long, so the loop is not kept waiting for the GIL while it writes "
                        "the audio out (default 0: off; runs 15-16 measured no change on the GPU host)")
    p.add_argument("--max-body-bytes", type=int, default=64 * 1024)
    p.add_argument("--max-text-chars", type=int, default=5000)
    p.add_argument("--max-ws-message-bytes", type=int, default=1024 * 1024)
    p.add_argument("--max-contexts-per-connection", type=int, default=16)
    p.add_argument("--max-ws-send-buffer-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument("--max-ws-connections", type=int, default=1024,
                   help="WebSocket connections open at once; one more is closed with 1013 at connect")
    p.add_argument("--max-connections", type=int, default=2048,
                   help="connections open at once, HTTP and WebSocket: an HTTP request past it gets 503 "
                        "too_many_connections (Retry-After) and its connection is closed")
    p.add_argument("--http-write-stall-s", type=float, default=30.0,
                   help="an HTTP client that does not drain its response for this long (the server's writes "
                        "paused, the socket buffers full) is cut off and its stream cancelled")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    p.set_defaults(func=_serve)


def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="run the voice agent with its browser page (offline defaults; docs/agent.md)")
    p.add_argument("--model", type=Path, default=None,
                   help="checkpoint directory: start a Cadence engine on it (else CADENCE_URL, else no TTS)")
    p.add_argument("--cadence-url", default=None, help="an already running engine's ws://.../v1/stream")
    p.add_argument("--config", type=Path, default=None, help="TOML file of agent settings (docs/agent.md)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7860, help="0 picks a free port")
    p.add_argument("--device", default="cpu", help="the engine's device with --model (cpu or cuda)")
    p.set_defaults(func=_demo)


def _add_bench(sub) -> None:
    from bench.load.options import add_bench_arguments  # standard library only: cheap at parser build

    p = sub.add_parser("bench", help="open-loop load benchmark of a streaming TTS server (docs/bench.md)")
    add_bench_arguments(p)
    p.set_defaults(func=_bench)


def _bench(args) -> int:
    from bench.load.main import main as bench_main  # httpx, websockets, numpy, matplotlib: only when run

    return bench_main(args)


def _demo(args) -> int:
    from agent.demo import load_config, run_demo

    if args.model is not None and args.cadence_url is not None:
        raise ValueError("give --model or --cadence-url, not both")
    if args.config is not None and not args.config.is_file():
        raise FileNotFoundError(f"config file {args.config} does not exist")
    if args.model is not None:
        check_device(args.device)
    cfg = load_config(args.config, cadence_url=args.cadence_url)
    return run_demo(cfg, host=args.host, port=args.port, model=args.model, device=args.device)


def _serve(args) -> int:
    from .loading import load_model_dir
    from .scheduler.config import SchedulerConfig
    from .server.config import ServerConfig
    from .server.run import bind, serve

    cfg = ServerConfig(host=args.host, port=args.port, max_body_bytes=args.max_body_bytes,
                       max_text_chars=args.max_text_chars, max_ws_message_bytes=args.max_ws_message_bytes,
                       max_contexts_per_connection=args.max_contexts_per_connection,
                       max_ws_send_buffer_bytes=args.max_ws_send_buffer_bytes,
                       max_ws_connections=args.max_ws_connections, max_connections=args.max_connections,
                       http_write_stall_s=args.http_write_stall_s,
                       log_level=args.log_level).validate()
    for name in ("max_active_streams", "max_queued_streams"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    policy = {k: getattr(args, k) for k in ("realtime_margin", "yield_buffer_s") if getattr(args, k) is not None}
    policy["codec_tick_steps"] = args.codec_tick
    policy["codec_tick_yields_to_prefill"] = args.codec_tick_yields_to_prefill
    policy["newcomer_lane"] = args.newcomer_lane
    if args.always_lookahead:
        policy["lookahead_buffer_s"] = None
    elif args.lookahead_buffer_s is not None:
        policy["lookahead_buffer_s"] = args.lookahead_buffer_s
    policy["reject_predicted_underrun"] = {"auto": None, "on": True, "off": False}[args.underrun_admission]
    scheduler = SchedulerConfig(**policy).validate()  # a bad value: one line, exit 2
    if not args.gil_switch_ms > 0:
        raise ValueError(f"--gil-switch-ms must be > 0, got {args.gil_switch_ms}")
    if args.cpu_wake_latency_us is not None and args.cpu_wake_latency_us < 0:
        raise ValueError(f"--cpu-wake-latency-us must be >= 0, got {args.cpu_wake_latency_us}")
    if not args.first_audio_yield_ms >= 0:
        raise ValueError(f"--first-audio-yield-ms must be >= 0, got {args.first_audio_yield_ms}")
    if args.codec_window_max is not None and args.codec_window_max < 0:
        raise ValueError(f"--codec-window-max must be >= 0, got {args.codec_window_max}")
    from .runtime.options import FastPathOptions

    fast_path = FastPathOptions(**{k: v for k, v in vars(args).items()
                                   if k in FastPathOptions.__dataclass_fields__ and v is not None})
    for name, problem in fast_path.problems():  # one line, exit 2, before the model loads; fields named as flags
        message = f"{name} {problem}"
        for field in FastPathOptions.__dataclass_fields__:
            message = message.replace(field, "--" + field.replace("_", "-"))
        raise ValueError(message)
    for flag in ("cp_pdl", "talker_pdl"):
        if getattr(fast_path, flag) and not str(args.device).startswith("cuda"):
            raise ValueError(f"--{flag.replace('_', '-')} needs a CUDA device (sm90+), not {args.device}")
    if args.prefill_stream and not str(args.device).startswith("cuda"):
        raise ValueError(f"--prefill-stream needs a CUDA device, not {args.device}")
    from .engine.profile import EngineProfile

    profile = EngineProfile(args.profile_engine, args.profile_seconds) if args.profile_engine else None
    check_device(args.device)
    load_model_dir(args.model)  # a missing or wrong directory fails before the socket is taken
    sock = bind(cfg)
    from .engine.core import StreamingEngine

    caps = {k: getattr(args, k) for k in ("max_active_streams", "max_queued_streams")
            if getattr(args, k) is not None}
    engine = StreamingEngine(args.model, device=args.device, scheduler=scheduler, codec_stream=args.codec_stream,
                             codec_precision=args.codec_precision, freeze_gc=args.gc_freeze, profile=profile,
                             fast_path=fast_path, prefill_stream=args.prefill_stream,
                             first_audio_yield_s=args.first_audio_yield_ms / 1e3,
                             codec_window_max=args.codec_window_max, codec_rope_kv=args.codec_rope_kv,
                             codec_conv_windows=args.codec_conv_windows, **caps)
    # The engine thread hands the GIL back and forth with the server's event loop on every device
    # wait; under load the loop runs Python in bursts (a chunk for each of dozens of streams), and
    # with the 5 ms default a waiting thread sits out up to 5 ms before it may take the GIL.
    sys.setswitchinterval(args.gil_switch_ms / 1e3)
    host, port = sock.getsockname()[:2]
    print(f"cadence serve: listening on http://{host}:{port} (model {args.model}, device {args.device})",
          file=sys.stderr)
    from .server.cpu_wake import CpuWakeLatency

    held = args.cpu_wake_latency_us
    wake = CpuWakeLatency(held) if held is not None else contextlib.nullcontext()
    # uvicorn re-raises Ctrl-C after its graceful shutdown
    with contextlib.suppress(KeyboardInterrupt), wake:
        serve(engine, cfg, sock)
    print("cadence serve: stopped", file=sys.stderr)
    return 0


def _make_checkpoint(args) -> int:
    import torch

    from .checkpoint import DEFAULT_CHARS_PER_SECOND, make_checkpoint

    check_device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, None: None}[args.dtype]
    out = make_checkpoint(args.size, args.out, seed=args.seed, dtype=dtype, device=args.device,
                          variant=args.variant.replace("-", "_"),
                          chars_per_second=args.chars_per_second or DEFAULT_CHARS_PER_SECOND)
    print(f"wrote random-weight {args.size} checkpoint to {out}", file=sys.stderr)
    return 0


def write_wav(path: Path, pcm: np.ndarray, sample_rate: int) -> None:
    pcm16 = (np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm16.tobytes())


def _say(args) -> int:
    from tqdm import tqdm

    from .loading import load_model_dir
    from .prompt import Layout, VoiceSpec, resolve_voice
    from .sampling import SamplingParams
    from .synthesizer import Synthesizer

    text = args.text if args.text not in (None, "-") else sys.stdin.read()
    if not text.strip():
        raise ValueError("no text given (pass it as an argument or on stdin)")
    if args.max_frames is not None and args.max_frames < 1:
        raise ValueError("--max-frames must be >= 1")
    voice = VoiceSpec(args.voice, args.language, args.instruct)
    _, cfg = load_model_dir(args.model)
    resolve_voice(cfg, voice)  # fail on a bad voice or language before loading weights
    if not args.out.parent.is_dir():
        raise ValueError(f"output directory {args.out.parent} does not exist")

    check_device(args.device)
    synth = Synthesizer(args.model, device=args.device)
    params = SamplingParams.greedy() if args.greedy else SamplingParams.from_defaults(synth.defaults)
    overrides = {"seed": args.seed, "temperature": args.temperature, "top_k": args.top_k,
                 "top_p": args.top_p}
    params = replace(params, **{k: v for k, v in overrides.items() if v is not None})
    layout = Layout.STREAMING if args.layout == "streaming" else Layout.NON_STREAMING
    item = synth.prepare(text, voice, layout=layout, params=params, max_frames=args.max_frames)
    total = item.forced_frames or item.max_frames
    with tqdm(total=total, unit="frame", desc="synthesising", file=sys.stderr,
              disable=not sys.stderr.isatty() and total > 10_000) as bar:
        (speech,) = synth.synthesize([item], on_frame=lambda k: bar.update(1))
    write_wav(args.out, speech.pcm, speech.sample_rate)
    seconds = len(speech.pcm) / speech.sample_rate
    print(f"wrote {args.out} ({seconds:.2f} s, {speech.codes.shape[0]} frames, 24 kHz)", file=sys.stderr)
    return 0


def check_device(device: str) -> None:
    """A --device that this machine has, or a ValueError saying why not (instead of a traceback from
    deep inside the checkpoint loader)."""
    import torch

    try:
        d = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"--device {device!r} is not a device ({e})") from None
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available (torch {torch.__version__})")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif d.type != "cpu":
        raise ValueError(f"--device {device}: only cpu and cuda are supported")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cadence", description="Cadence: real-time Qwen3-TTS voice agents")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_make_checkpoint(sub)
    _add_say(sub)
    _add_serve(sub)
    _add_demo(sub)
    _add_bench(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .weights import CheckpointError

    try:
        return args.func(args)
    except (ValueError, CheckpointError, FileNotFoundError, PermissionError) as e:
        print(f"cadence {args.command}: error: {e or type(e).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cadence {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
