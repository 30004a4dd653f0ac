"""`cadence bench` entry point: run the sweep, write results.json, report.md and the plots."""

from __future__ import annotations

import argparse
import sys

from .config import BenchConfig


def main(args: argparse.Namespace) -> int:
    cfg = BenchConfig.from_args(args)
    if not cfg.out.parent.is_dir():
        raise ValueError(f"output directory's parent {cfg.out.parent} does not exist")
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise ValueError("cadence bench needs httpx: pip install -e '.[bench]'") from None
    if cfg.plots:
        from . import plots

        if not plots.available():
            raise ValueError("plots need matplotlib: pip install -e '.[bench]' (or pass --no-plots)")
    from .output import to_json, write_json
    from .report import render
    from .sweep import run_sweep

    cfg.out.mkdir(exist_ok=True)
    result = run_sweep(cfg, after_rate=lambda partial: write_json(cfg.out / "results.json", to_json(partial, sys.argv)))
    data = to_json(result, sys.argv)  # this process's command line, as the user typed it
    write_json(cfg.out / "results.json", data)
    names = []
    if cfg.plots:
        from .plots import write_plots

        names = write_plots(data, cfg.out)
    (cfg.out / "report.md").write_text(render(data, names))
    cap = data["capacity_rate"]
    print(f"cadence bench: capacity {f'{cap:g} req/s' if cap is not None else 'none'}; wrote {cfg.out}/results.json, "
          f"report.md{', ' + ', '.join(names) if names else ''}", file=sys.stderr)
    return 0
