"""`cadence bench`: registered with the `cadence` command through the `cadence.commands` entry points."""

from __future__ import annotations


def register(sub) -> None:
    from .options import add_bench_arguments  # standard library only: cheap at parser build

    p = sub.add_parser("bench", help="open-loop load benchmark of a streaming TTS server (docs/bench.md)")
    add_bench_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from .main import main  # httpx, websockets, numpy, matplotlib: only when run

    return main(args)
