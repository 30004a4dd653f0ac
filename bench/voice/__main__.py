"""python -m bench.voice [--client browser|aiortc] [--turns 10] [--url URL] [--out DIR] [--demo-args "..."]

`register(subparsers)` adds the same as a `cadence` subcommand (entry-point group `cadence.commands`)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .run import CLIENTS, run_voice_bench

NAME = "voice-bench"
HELP = ("voice-to-voice benchmark: spoken questions into the agent over WebRTC; p50/p95 of the end of "
        "speech -> first bot audio heard, per stage (JSON + PNG)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--client", choices=CLIENTS, default="browser",
                   help="headless Chromium on the agent's page, or an aiortc client (no browser needed)")
    p.add_argument("--turns", type=int, default=10, help="questions asked, one at a time")
    p.add_argument("--url", help="a running agent (default: start `cadence demo` here)")
    p.add_argument("--demo-args", default="", help='arguments for the `cadence demo` started here, e.g. "--model DIR"')
    p.add_argument("--out", type=Path, default=Path("voice-bench"), help="where voice-bench.json/.png go")


def run(args: argparse.Namespace) -> int:
    result = run_voice_bench(client=args.client, turns=args.turns, url=args.url,
                             demo_args=tuple(shlex.split(args.demo_args)), out=args.out)
    total = result["speech_end_to_first_audio"]
    print(f"{result['turns_heard']}/{result['turns']} turns heard; end of speech -> first bot audio: "
          f"p50 {total.get('p50_s')} s, p95 {total.get('p95_s')} s")
    for name, s in result["stages"].items():
        print(f"  {name}: p50 {s.get('p50_s')} s, p95 {s.get('p95_s')} s (n={s['n']})")
    print(f"written: {args.out / 'voice-bench.json'}, {args.out / 'voice-bench.png'}")
    return 0 if result["turns_heard"] == result["turns"] else 1


def register(subparsers) -> None:
    p = subparsers.add_parser(NAME, help=HELP, description=HELP)
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.voice", description=HELP)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except (ValueError, FileNotFoundError) as e:
        p.exit(2, f"bench.voice: {e}\n")


if __name__ == "__main__":
    raise SystemExit(main())
