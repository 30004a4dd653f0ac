"""`cadence demo`: registered with the `cadence` command through the `cadence.commands` entry points;
`python -m agent.cli ARGS` runs it from a tree that is not installed."""

from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the voice agent with its browser page (offline defaults; docs/agent.md)")
    p.add_argument("--model", default=None,
                   help="checkpoint directory or Hugging Face repo id: start a Cadence engine on it (else CADENCE_URL, "
                        "else no TTS)")
    p.add_argument("--revision", default=None, help="with a repo id: a branch, tag or commit")
    p.add_argument("--cadence-url", default=None, help="an already running engine's ws://.../v1/stream")
    p.add_argument("--config", type=Path, default=None, help="TOML file of agent settings (docs/agent.md)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=7860, help="0 picks a free port")
    p.add_argument("--device", default="cpu", help="the engine's device with --model (cpu or cuda)")
    p.add_argument("--flow", type=Path, default=None, help="a structured conversation (YAML or JSON; docs/flows.md)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes serving the page and its sessions on the one port, for more sessions than one "
                        "Python event loop carries (default 1)")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from tts_engine.cli import check_device
    from tts_engine.hub import resolve_model

    from .demo import load_access, load_config, run_demo

    if not 1 <= args.workers <= 64:
        raise ValueError(f"--workers must be in 1-64, got {args.workers}")
    if args.model is not None and args.cadence_url is not None:
        raise ValueError("give --model or --cadence-url, not both")
    if args.config is not None and not args.config.is_file():
        raise FileNotFoundError(f"config file {args.config} does not exist")
    # Who may use the page: checked first, so a server that would be exposed stops before any download.
    access = load_access(args.config, os.environ, host=args.host, port=args.port)
    model = None
    if args.model is not None:
        check_device(args.device)
        model = resolve_model(args.model, args.revision)
    cfg = load_config(args.config, cadence_url=args.cadence_url, flow=str(args.flow) if args.flow else None)
    if cfg.flow is not None:
        from flows.loader import load_flow

        load_flow(cfg.flow)  # a bad flow file fails now, with its file, line and key, not inside a session
    return run_demo(cfg, access, model=model, device=args.device, workers=args.workers)


def main(argv: list[str] | None = None) -> int:
    from tts_engine.cli import run_client_command

    return run_client_command(register, "demo", argv)


if __name__ == "__main__":
    sys.exit(main())
