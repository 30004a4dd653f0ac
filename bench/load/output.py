"""results.json: the configuration, the environment, per-rate summaries and every raw request.

Strict JSON has no infinity; a latency percentile that lands on a request that was never heard is
written as the string "inf". Floats are rounded to 6 decimals (microseconds for times), and the file
is indented only down to one line per request record: a long sweep holds tens of thousands.
"""

from __future__ import annotations

import gzip
import json
import lzma
import math
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .sweep import SweepResult

SCHEMA = "cadence-bench/1"


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            return "inf" if value > 0 else "-inf" if value < 0 else "nan"
        return round(value, 6)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    return out or None


def environment() -> dict:
    """Where the client ran; the GPU list is this host's (the server's when both share a host,
    as the method requires)."""
    gpus = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"])
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "gpus": gpus.splitlines() if gpus else [],
            # CADENCE_COMMIT: set by the GPU run scripts, whose copy of the tree has no git metadata of its own.
            "git_commit": os.environ.get("CADENCE_COMMIT")
            or _run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"])}


def to_json(result: SweepResult, argv: list[str]) -> dict:
    cfg = result.cfg
    wer = result.wer()
    return _clean({
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": [Path(argv[0]).name if argv and Path(argv[0]).name == "cadence" else argv[0], *argv[1:]]
        if argv else [],
        "environment": environment(),
        "config": cfg.as_dict(),
        "slo_ms": cfg.slo_s * 1e3,
        "capacity_rate": result.capacity.rate if result.capacity else None,
        "gpu_price_per_hour": cfg.gpu_price,
        "cost_per_million_chars": result.cost_per_million_chars,
        "rates": [{**s.as_dict(), "sustained": s.sustained(cfg.slo_s)} for s in result.rates],
        "wer": asdict(wer) if wer else None,
        "trials": [{
            "rate": t.rate, "seed": t.seed, "wall_s": t.outcome.wall_s, "client_pids": t.outcome.client_pids,
            "peak_in_flight_measured": t.peak_in_flight_measured,
            "peak_in_flight_all": max(n for _, n in t.outcome.in_flight),
            "char_mix": asdict(t.char_mix), "wer": asdict(t.wer) if t.wer else None,
            "in_flight": t.outcome.in_flight,
            "records": [asdict(r) for r in t.outcome.records],
        } for t in result.trials],
    })


def dumps(value: Any, depth: int = 0, indent_depth: int = 4) -> str:
    """JSON with containers indented down to `indent_depth` levels, compact below (a record per line)."""
    if depth >= indent_depth or not isinstance(value, dict | list) or not value:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    pad = "\n" + " " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{json.dumps(k)}: {dumps(v, depth + 1, indent_depth)}" for k, v in value.items()]
        return "{" + pad + ("," + pad).join(items) + "\n" + " " * depth + "}"
    items = [dumps(v, depth + 1, indent_depth) for v in value]
    return "[" + pad + ("," + pad).join(items) + "\n" + " " * depth + "]"


def write_json(path: Path, data: dict) -> None:
    path.write_text(dumps(data) + "\n")


def read_run(run_dir: Path) -> dict:
    """A run's data: results.json, results.json.xz (how runs are committed under bench/results: a 120 s
    sweep's raw records are 10-15 MB of JSON, a seventh of that with xz -9e) or results.json.gz."""
    plain = Path(run_dir) / "results.json"
    if plain.exists():
        return json.loads(plain.read_text())
    packed = plain.with_suffix(".json.xz")
    with (lzma.open(packed, "rt") if packed.exists() else gzip.open(plain.with_suffix(".json.gz"), "rt")) as f:
        return json.load(f)
