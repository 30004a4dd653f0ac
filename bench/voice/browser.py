"""The benchmark's browser client: headless Chromium on the agent's own page (browser_turns.mjs),
its fake microphone playing the questions from one WAV, the page's own per-turn measurement.

The WAV is LEAD_S of silence (the page connects and its pipeline starts meanwhile), then each
question followed by GAP_S of silence, long enough for the offline agent's whole reply (the
scripted LLM's ~45 words, ~18 s of Piper speech) so that no question talks over an answer."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from .turns import speak

LEAD_S = 10.0  # the page connects and its pipeline starts (4-8 s on a busy 2-core machine)
GAP_S = 26.0
RATE = 48000

HERE = Path(__file__).resolve().parent
E2E = HERE.parent.parent / "tests" / "agent" / "e2e"  # its package.json pins playwright-core
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def require_browser() -> Path:
    """The playwright-core directory; a clear error naming what is missing otherwise."""
    playwright = E2E / "node_modules" / "playwright-core"
    if not Path(CHROMIUM).is_file():
        raise FileNotFoundError(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    if not playwright.is_dir():
        raise FileNotFoundError(f"playwright-core is missing (npm --prefix {E2E} ci)")
    return playwright


def records_from(texts: list[str], turns: list[dict], events: list[dict]) -> list[dict]:
    """Per question, the page's turn and the agent's events in seconds (the page's clock):
    see report.py for the keys."""
    out = []
    for i, question in enumerate(texts):
        if i >= len(turns):
            out.append({"question": question, "speech_end": None, "turn_end": None, "stt_final": None,
                        "bot_turn": None, "bot_started": None, "heard": None, "transcript": None, "reply": None})
            continue
        turn = turns[i]
        end = turns[i + 1]["speech_end_at"] if i + 1 < len(turns) else float("inf")

        def first(kind: str, after: float, end: float = end):
            return next((e for e in events if e["type"] == kind and after <= e["at"] < end), None)

        def at(event) -> float | None:
            return None if event is None else event["at"] / 1e3

        stt = first("stt_final", turn["speech_end_at"])  # it reaches the client after the speech it heard
        out.append({
            "question": question,
            "speech_end": turn["speech_end_at"] / 1e3, "turn_end": turn["turn_end_at"] / 1e3,
            "stt_final": at(stt), "bot_turn": at(first("bot_turn", turn["turn_end_at"])),
            "bot_started": at(first("bot_started", turn["turn_end_at"])), "heard": turn["heard_at"] / 1e3,
            "transcript": None if stt is None else stt["text"].strip(),
            "reply": " ".join(e["text"] for e in events if e["type"] == "bot" and turn["turn_end_at"] <= e["at"] < end),
        })
    return out


def run_browser(url: str, texts: list[str], *, timeout_s: float = 1200) -> tuple[list[dict], dict]:
    """The turns through headless Chromium against the agent at `url`: (records, extra facts)."""
    playwright = require_browser()
    gap = np.zeros(int(GAP_S * RATE), dtype=np.int16)
    timeline = [np.zeros(int(LEAD_S * RATE), dtype=np.int16)]
    for text in texts:
        timeline += [speak(text, RATE), gap]
    with tempfile.TemporaryDirectory() as tmp:
        mic, out_path = Path(tmp) / "mic.wav", Path(tmp) / "out.json"
        with wave.open(str(mic), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(np.concatenate(timeline).tobytes())
        run = subprocess.run(["node", str(HERE / "browser_turns.mjs"), url, str(mic), str(len(texts)), str(out_path)],
                             env={**os.environ, "PLAYWRIGHT_DIR": str(playwright), "CHROMIUM": CHROMIUM,
                                  # past the file's end, a turn that never came is not coming
                                  "VOICE_RUN_TIMEOUT_MS": str(int((sum(map(len, timeline)) / RATE + 60) * 1e3))},
                             capture_output=True, text=True, timeout=timeout_s)
        if run.returncode != 0:
            raise RuntimeError(f"the browser run failed:\n{run.stderr[-4000:]}")
        result = json.loads(out_path.read_text())
    extra = {"models_load_s": result["models_load_s"], "timed_out": result["timed_out"],
             "pipeline_ready_after_connect_s": round((result["ready_at"] - result["mic_opened_at"]) / 1e3, 3),
             "console": result["console"][-20:]}
    return records_from(texts, result["turns"], result["events"]), extra
