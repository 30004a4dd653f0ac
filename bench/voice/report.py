"""Per-turn timings -> the benchmark's JSON and plot.

A turn's record holds client-clock times in seconds (None when the event never came):
`speech_end` (the last loud sample of the question the client sent), `turn_end` (the agent's
user_stopped event), `stt_final` (the recogniser's final transcript), `bot_turn` (the LLM's reply
began), `bot_started` (the first bot audio handed to the transport), `heard` (the first bot audio
above -50 dBFS in the received track), plus `question`, `transcript`, `reply`.
Event times are when the data channel delivered them, so each is a bound on when it happened.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# stage name -> (from, to) record keys, in pipeline order
STAGES = {
    "turn end (VAD stop + speech timeout)": ("speech_end", "turn_end"),
    "final transcript after speech end": ("speech_end", "stt_final"),
    "LLM reply start after turn end": ("turn_end", "bot_turn"),
    "TTS first audio to transport": ("bot_turn", "bot_started"),
    "transport + playout to heard": ("bot_started", "heard"),
}
TOTAL = ("speech_end", "heard")


def _gap(record: dict, start: str, end: str) -> float | None:
    a, b = record.get(start), record.get(end)
    return None if a is None or b is None else b - a


def _pct(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_s": round(float(np.percentile(values, 50)), 3),
            "p95_s": round(float(np.percentile(values, 95)), 3), "max_s": round(max(values), 3)}


def summarise(records: list[dict], meta: dict) -> dict:
    """The report: voice-to-voice percentiles, each stage's, and the records themselves."""
    total = [g for r in records if (g := _gap(r, *TOTAL)) is not None]
    return {
        **meta,
        "turns": len(records),
        "turns_heard": len(total),
        "speech_end_to_first_audio": _pct(total),
        "stages": {name: _pct([g for r in records if (g := _gap(r, a, b)) is not None])
                   for name, (a, b) in STAGES.items()},
        "records": records,
    }


def write(report: dict, out: Path) -> list[Path]:
    """report.json and latency.png in `out`; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "voice-bench.json"]
    paths[0].write_text(json.dumps(report, indent=2) + "\n")
    try:
        import matplotlib
    except ImportError:
        return paths
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in report["records"] if _gap(r, *TOTAL) is not None]
    fig, ax = plt.subplots(figsize=(10.5, 0.45 * len(records) + 1.8))
    names = list(STAGES)[:1] + list(STAGES)[2:]  # the stages that add up (the transcript overlaps)
    colours = ["#8da0cb", "#fc8d62", "#66c2a5", "#e78ac3"]
    for i, r in enumerate(records):
        left = 0.0
        for name, colour in zip(names, colours):
            width = _gap(r, *STAGES[name]) or 0.0
            ax.barh(i, width * 1e3, left=left * 1e3, color=colour, label=name if i == 0 else None)
            left += width
        if (stt := _gap(r, "speech_end", "stt_final")) is not None:
            ax.plot(stt * 1e3, i, "k|", markersize=12, label="final transcript" if i == 0 else None)
    p50 = report["speech_end_to_first_audio"].get("p50_s")
    if p50 is not None:
        ax.axvline(p50 * 1e3, color="grey", linestyle="--", linewidth=1, label=f"p50 {p50 * 1e3:.0f} ms")
    ax.set(xlabel="ms after the end of the user's speech", ylabel="turn", yticks=range(len(records)),
           title=f"Voice to voice: end of speech -> first bot audio heard ({report.get('client', '')})")
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    paths.append(out / "voice-bench.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
