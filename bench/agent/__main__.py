"""`python -m bench.agent ...`: the agent benchmark without the `cadence` dispatcher."""

from __future__ import annotations

import argparse
import sys

from .cli import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return run(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"agent-bench: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
