"""`cadence` console command.

The engine's own commands (serve, say, make-checkpoint) live here; the clients' commands (demo, phone,
talk, bench) register themselves through the `cadence.commands` entry points (pyproject.toml), so the
engine package imports none of its clients.

Every user error (bad argument, unknown voice or language, missing model directory) ends in one
line on stderr and exit status 2; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import wave
from dataclasses import replace
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_make_checkpoint(sub) -> None:
    p = sub.add_parser("make-checkpoint", help="write a random-weight checkpoint in the official layout")
    p.add_argument("--size", required=True, choices=["tiny", "tiny-0.6b", "0.6b", "1.7b"],
                   help="tiny: the 1.7B layout at toy size; tiny-0.6b: the 0.6B layout at toy size")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variant", choices=["custom-voice", "voice-design", "base"], default="custom-voice",
                   help="base: no built-in voices, cloning from reference audio")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default=None,
                   help="talker weights dtype (default: fp32 for tiny, bf16 otherwise)")
    p.add_argument("--device", default="cpu", help="where to draw the random tensors (e.g. cuda)")
    p.add_argument("--chars-per-second", type=float, default=None,
                   help="speaking rate that sets the length of random-weight output (default 14.5)")
    p.set_defaults(func=_make_checkpoint)


def _add_say(sub) -> None:
    p = sub.add_parser("say", help="synthesise text to a WAV file (reference path)")
    p.add_argument("text", nargs="?", default=None, help="text to speak; omit or '-' to read stdin")
    p.add_argument("--model", required=True, help="checkpoint directory or Hugging Face repo id")
    p.add_argument("--revision", default=None, help="with a repo id: a branch, tag or commit")
    p.add_argument("--voice", default=None, help="built-in voice (CustomVoice models)")
    p.add_argument("--ref-audio", type=Path, default=None, help="reference audio to clone the voice of (Base models)")
    p.add_argument("--ref-text", default=None, help="its transcript: in-context cloning (else speaker embedding only)")
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
    p.add_argument("--model", help="checkpoint directory or Hugging Face repo id (downloaded once into its cache)")
    p.add_argument("--revision", default=None, help="with a repo id: a branch, tag or commit")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                   help="server limits, scheduling and engine settings (see --show-config)")
    p.add_argument("--show-config", action="store_true",
                   help="print every setting of the config file with its default, and exit")
    p.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="listen port (default 8000; 0 picks a free port)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default=None)
    p.add_argument("--max-active-streams", type=int, default=None, help="streams decoding at once (default 64)")
    p.add_argument("--max-queued-streams", type=int, default=None,
                   help="streams admitted beyond them, waiting for a slot (default 64)")
    p.add_argument("--profile-engine", type=Path, default=None, metavar="PATH",
                   help="write a cProfile of the engine thread to PATH and its sampled stacks to PATH.stacks and "
                        "PATH.top.txt (diagnosis only: profiling slows the engine)")
    p.set_defaults(func=_serve)


def _serve(args) -> int:
    from . import settings as settings_file

    if args.show_config:
        sys.stdout.write(settings_file.defaults_toml())
        return 0
    if args.model is None:
        raise ValueError("--model is required")
    settings = settings_file.load(args.config, {
        "server": {"host": args.host, "port": args.port, "log_level": args.log_level},
        "scheduler": {"max_active_streams": args.max_active_streams, "max_queued_streams": args.max_queued_streams},
    })
    from .engine.profile import EngineProfile
    from .hub import resolve_model
    from .loading import load_model_dir
    from .server.run import bind, serve
    from .server.security import with_api_keys

    # The one place the environment is read: API keys from CADENCE_API_KEYS join the config file's.
    server = with_api_keys(settings.server, os.environ)

    profile = EngineProfile(args.profile_engine, settings.engine.profile_seconds) if args.profile_engine else None
    check_device(args.device)
    from .runtime.progress import log_to_stderr

    log_to_stderr(server.log_level)  # loading, kernel builds and graph capture say where a start spends its time
    model = resolve_model(args.model, args.revision)
    load_model_dir(model)  # a missing or wrong directory fails before the socket is taken
    sock = bind(server)
    from .engine.core import StreamingEngine

    engine = StreamingEngine(model, device=args.device, scheduler=settings.scheduler,
                             codec_precision=settings.engine.codec_precision, freeze_gc=settings.engine.gc_freeze,
                             max_context=settings.engine.max_context, profile=profile)
    # The engine thread hands the GIL back and forth with the server's event loop on every device
    # wait; under load the loop runs Python in bursts (a chunk for each of dozens of streams), and
    # with the 5 ms default a waiting thread sits out up to 5 ms before it may take the GIL.
    sys.setswitchinterval(settings.engine.gil_switch_ms / 1e3)
    host, port = sock.getsockname()[:2]
    scheme = "https" if server.tls_certfile else "http"
    print(f"cadence serve: listening on {scheme}://{host}:{port} (model {model}, device {args.device})",
          file=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises Ctrl-C after its graceful shutdown
        serve(engine, server, sock)
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

    from .hub import resolve_model
    from .loading import load_model_dir
    from .prompt import Layout, VoiceSpec, resolve_voice
    from .sampling import SamplingParams
    from .synthesizer import Synthesizer

    text = args.text if args.text not in (None, "-") else sys.stdin.read()
    if not text.strip():
        raise ValueError("no text given (pass it as an argument or on stdin)")
    if args.max_frames is not None and args.max_frames < 1:
        raise ValueError("--max-frames must be >= 1")
    if args.ref_text is not None and args.ref_audio is None:
        raise ValueError("--ref-text goes with --ref-audio")
    model = resolve_model(args.model, args.revision)
    voice = VoiceSpec(args.voice, args.language, args.instruct)
    _, cfg = load_model_dir(model)
    if args.ref_audio is None:
        resolve_voice(cfg, voice)  # fail on a bad voice or language before loading weights
    if not args.out.parent.is_dir():
        raise ValueError(f"output directory {args.out.parent} does not exist")

    check_device(args.device)
    synth = Synthesizer(model, device=args.device)
    if args.ref_audio is not None:
        from .voices.audio import load_reference_file

        clone = synth.clone_voice(load_reference_file(args.ref_audio), args.ref_text)
        voice = VoiceSpec(args.voice or "reference", args.language, args.instruct, cloned=clone)
        resolve_voice(cfg, voice)
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
    from .cluster.cli import add_cluster  # imports Ray only when `cadence cluster` runs

    add_cluster(sub)
    for command in sorted(entry_points(group="cadence.commands"), key=lambda c: c.name):
        command.load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return _dispatch(build_parser().parse_args(argv))


def run_client_command(register, name: str, argv: list[str] | None = None) -> int:
    """`cadence NAME ARGV` for one client command given its `register`, without the entry points of an
    installed package (`python -m agent.cli`, `python -m transports.phone` on a tree that is only on
    PYTHONPATH): the same parser, errors and exit codes."""
    parser = _Parser(prog="cadence")
    register(parser.add_subparsers(dest="command", required=True, parser_class=_Parser))
    return _dispatch(parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)]))


def _dispatch(args) -> int:
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, PermissionError) as e:  # weights.CheckpointError is a ValueError
        print(f"cadence {args.command}: error: {e or type(e).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cadence {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
