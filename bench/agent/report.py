"""The agent benchmark's report: p50/p95/p99 per N (nearest rank, bench/load/percentiles.py) as
agent-bench.json, agent-bench.md and agent-bench.png. A turn that was never heard enters a latency
as +inf, so it counts against the percentiles instead of vanishing."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.load.percentiles import distribution

LATENCIES = ("token_to_audio_ms", "token_to_tts_ms", "speech_end_to_audio_ms", "speech_end_to_transcript_ms",
             "speech_end_to_token_ms", "barge_in_ms", "barge_in_from_speech_ms")
WAITS = ("speech_end_to_transcript_ms", "speech_end_to_token_ms")  # parts of a turn's wait, where stamped


def summarise(n: int, records: list[dict], errors: list[str]) -> dict:
    heard = [r for r in records if r["heard"]]
    row = {"conversations": n, "turns": len(records), "turns_heard": len(heard), "caller_errors": errors,
           "underruns": sum(r["underruns"] for r in heard),
           "turns_with_underruns": sum(1 for r in heard if r["underruns"]),
           "underrun_ms": distribution([r["underrun_ms"] for r in heard]).as_dict()}
    for key in LATENCIES:
        if key.startswith("barge"):
            values = [r[key] for r in records if r["interrupted"] and r[key] is not None]
        elif key in WAITS:
            values = [r[key] for r in records if r.get(key) is not None]
        else:
            values = [math.inf if r[key] is None else r[key] for r in records
                      if key == "token_to_audio_ms" or r["heard"]]
        row[key] = distribution(values).as_dict()
    return row


def _lag(r: dict, who: str) -> str:
    lag = r.get(f"{who}_loop_lag_ms") or {}
    return "-" if lag.get("max") is None else f"{lag['p99']:.0f}/{lag['max']:.0f}"


def _cpu(r: dict) -> str:
    cpu = r.get("machine_cpu_busy")
    return "-" if not cpu else f"{cpu['mean']:.0%}, {cpu['peak']:.0%} of {cpu['cores']} cores"


def _ms(v) -> str:
    return "-" if v is None else ("never" if math.isinf(v) else f"{v:.0f}")


def render(data: dict) -> str:
    lines = [f"# Agent at scale: {data['transport']}", "", f"`{data['command']}`", "",
             f"LLM: {data['llm']}. TTS: {data['tts']}. Playout reports: {'on' if data['playout_reports'] else 'OFF'}. "
             f"Agent processes: {data.get('agent_workers', 1)}.",
             "", "| N | turns heard | LLM first token -> audible p50/p95/p99 ms "
             "| of which to engine audio at the agent | speech end -> audible p50/p95/p99 ms "
             "| of which to transcript, to LLM first token | underruns (turns) "
             "| barge-in -> silence p50/p95/p99 ms "
             "| loop lag p99/max ms: agent, callers | machine CPU busy: mean, busiest second (peak) | caller errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        trio = {k: "/".join(_ms(r[k][p]) for p in ("p50", "p95", "p99")) for k in LATENCIES}
        lines.append(f"| {r['conversations']} | {r['turns_heard']}/{r['turns']} | {trio['token_to_audio_ms']} | "
                     f"{trio['token_to_tts_ms']} | {trio['speech_end_to_audio_ms']} | "
                     f"{trio['speech_end_to_transcript_ms']}, {trio['speech_end_to_token_ms']} | {r['underruns']} "
                     f"({r['turns_with_underruns']}) | {trio['barge_in_ms']} | "
                     f"{_lag(r, 'agent')}, {_lag(r, 'callers')} | {_cpu(r)} | {len(r['caller_errors'])} |")
    return "\n".join(lines) + "\n"


def _plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    ns = [r["conversations"] for r in data["rows"]]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, key, title in zip(axes[:2], ("token_to_audio_ms", "barge_in_ms"),
                              ("LLM first token -> first audible audio", "barge-in -> silence")):
        for p in ("p50", "p95", "p99"):
            ys = [r[key][p] if r[key][p] is not None and math.isfinite(r[key][p]) else float("nan")
                  for r in data["rows"]]
            ax.plot(ns, ys, marker="o", label=p)
        ax.set(title=title, xlabel="concurrent conversations", ylabel="ms")
        ax.legend()
    axes[2].bar([str(n) for n in ns], [r["underruns"] for r in data["rows"]])
    axes[2].set(title="underruns at the caller", xlabel="concurrent conversations", ylabel="count")
    fig.suptitle(f"cadence agent-bench ({data['transport']}, playout reports "
                 f"{'on' if data['playout_reports'] else 'off'})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(data: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "agent-bench.json", out / "agent-bench.md", out / "agent-bench.png"]
    paths[0].write_text(json.dumps(data, indent=1))  # a turn never heard: Infinity
    paths[1].write_text(render(data))
    _plot(data, paths[2])
    return paths
