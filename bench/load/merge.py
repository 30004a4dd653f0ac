"""One run out of several `cadence bench` runs of the same method at different rates: e.g. a
sweep split over two GPUs, one server each, so that it fits a device session. Rates and trials are
pooled in rate order, capacity and cost recomputed; report.md and the plots are rendered again.
Runs may differ in their measured seconds (a sweep of 120 s phases with the 300 s one at 20 req/s):
each rate keeps its own, and the merged config's `duration_s` is then None.

    python -m bench.load.merge [--label TEXT] OUT RUN_DIR RUN_DIR [...]

The runs must agree on everything but their rates (target, arrivals, texts, SLO, label); each
run's command and environment are kept under "parts". `--label` gives the merged run its own label
and lets the parts' labels differ (e.g. parts run at two commits that differ only in GPU scripts).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .output import read_run, write_json
from .rerender import render_outputs
from .summary import cost_per_million_chars

SAME = ("target", "ws_mode", "word_interval_s", "warmup_s", "max_join", "text_chars", "voice", "language",
        "extra", "slo_s", "gpu_price", "label", "seeds")


def merge(runs: list[dict], label: str | None = None) -> dict:
    first = runs[0]
    for run in runs[1:]:
        for key in SAME if label is None else [k for k in SAME if k != "label"]:
            if run["config"].get(key) != first["config"].get(key):  # .get: older runs lack newer keys
                raise ValueError(f"runs differ in {key}: {first['config'].get(key)!r} vs {run['config'].get(key)!r}")
    rates = sorted((r for run in runs for r in run["rates"]), key=lambda r: r["rate"])
    if len({r["rate"] for r in rates}) != len(rates):
        raise ValueError(f"a rate appears in more than one run: {[r['rate'] for r in rates]}")
    held = [r for r in rates if r["sustained"]]
    cap = max(held, key=lambda r: r["rate"], default=None)
    price = first["config"]["gpu_price"]
    cost = cost_per_million_chars(price, cap["chars_per_s"]) if cap is not None and price is not None else None
    durations = {run["config"]["duration_s"] for run in runs}
    config = {**first["config"], "rates": [r["rate"] for r in rates],
              "duration_s": durations.pop() if len(durations) == 1 else None}
    if label is not None:
        config["label"] = label
    return {**first, "config": config,
            "capacity_rate": cap["rate"] if cap is not None else None, "cost_per_million_chars": cost,
            "rates": rates, "trials": sorted((t for run in runs for t in run["trials"]), key=lambda t: t["rate"]),
            "parts": [{"command": run["command"], "created": run["created"], "environment": run["environment"],
                       "rates": [r["rate"] for r in run["rates"]]} for run in runs]}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    label = None
    if args[:1] == ["--label"] and len(args) > 1:
        label, args = args[1], args[2:]
    if len(args) < 3:
        print("usage: python -m bench.load.merge [--label TEXT] OUT RUN_DIR RUN_DIR [...]", file=sys.stderr)
        return 2
    out = Path(args[0])
    data = merge([read_run(Path(d)) for d in args[1:]], label)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", data)
    names = render_outputs(data, out)
    print(f"{out / 'report.md'}: rates {data['config']['rates']}, capacity {data['capacity_rate']}, {len(names)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
