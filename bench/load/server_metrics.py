"""The engine's own counters around one trial: scraped from the target's /metrics (our server's
`cadence_engine_*` gauges) before and after, so a rate's record says what the server did during it
(host time by part, garbage-collection pauses, steps) rather than since its start. A target without
those metrics (a peer) gives None and the rate simply has no server section."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

PREFIX = "cadence_engine_"
# `name value` lines without labels; the engine exports only unlabelled gauges.
_LINE = re.compile(rf"^{PREFIX}([a-zA-Z0-9_]+) ([-+0-9.eEinfa]+)$")
# Levels, maxima since start and settings: kept as read after the trial. Every other value only
# grows while the server runs (counts, summed seconds), so its difference is the trial's share.
_LEVELS = re.compile(r"^(last_.*|.*_max_s|gc_frozen_objects|gil_switch_interval_s|.*_streams|pipeline_depth|ready"
                     r"|healthy|stalled|stalled_for_s|prefill_queue|steps_in_flight|predicted_cycle_ms|cost_.*"
                     r"|codec_graphs)$")


def parse(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            try:
                values[m.group(1)] = float(m.group(2))
            except ValueError:
                continue
    return values


def scrape(base_url: str, timeout_s: float = 3.0) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as resp:
            values = parse(resp.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return values or None


def during(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    """The trial's view: cumulative values as differences, the others as read after it."""
    if after is None:
        return None
    before = before or {}
    return {k: v if _LEVELS.match(k) else v - before.get(k, 0.0) for k, v in sorted(after.items())}


def pooled(trials: list[dict[str, float]]) -> dict[str, float] | None:
    """Several trials of one rate (seeds): counts summed, levels and maxima at their largest."""
    if not trials:
        return None
    keys = sorted({k for t in trials for k in t})
    return {k: (max if _LEVELS.match(k) else sum)(t.get(k, 0.0) for t in trials) for k in keys}


def host_per_iteration_ms(server: dict[str, float] | None) -> dict[str, float] | None:
    """The engine thread's time per loop iteration by part (drain, plan, launch, wait, read), ms. The
    longest iteration (`host_iteration_max_s`) is a level, not a sum: it is no part."""
    if not server or not server.get("host_iterations"):
        return None
    n = server["host_iterations"]
    return {k[len("host_"):-len("_s")]: v / n * 1e3 for k, v in server.items()
            if k.startswith("host_") and k.endswith("_s") and not k.endswith("_max_s")}


def device_per_iteration_ms(server: dict[str, float]) -> str:
    """The device's busy time per engine iteration (`device_busy_s`, 0 on a CPU engine), as the report prints it."""
    if not server.get("device_busy_s") or not server.get("host_iterations"):
        return "-"
    return f"{server['device_busy_s'] / server['host_iterations'] * 1e3:.2f}"
