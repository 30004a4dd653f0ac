"""Rebuild report.md and the plots of a finished run from its results.json (e.g. a GPU run made
with --no-plots on a machine without matplotlib).

    python -m bench.load.rerender bench/results/load-h200-<commit>
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import plots, report
from .output import read_run


def render_outputs(data: dict, out: Path) -> list[str]:
    """report.md (and the plots, where matplotlib is there) in `out` from a run's data; the plots' names."""
    names = plots.write_plots(data, out) if plots.available() else []
    (out / "report.md").write_text(report.render(data, names))
    return names


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.load.rerender RUN_DIR", file=sys.stderr)
        return 2
    out = Path(args[0])
    names = render_outputs(read_run(out), out)
    print(f"{out / 'report.md'}: {len(names)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
