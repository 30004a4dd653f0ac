"""Turn-taking comparison: when does the user aggregator end the user's turn, for each stop
strategy, on real speech fed in real time through Silero VAD (espeak-ng sentences, some with a
pause in the middle, as a person pausing between clauses)?

    python -m bench.voice.turn_taking [--out turn-taking.json]

A false cut-in: the turn ends in the pause, before the second half began. Latency: from the end
of the last loud 10 ms of speech to the turn's end. Transcripts are left out of the decision
(`wait_for_transcript=False`): the incremental recogniser has the transcript in hand by then.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import numpy as np

from .turns import speak, speech_end_s

RATE = 16000
FRAME = RATE // 50  # 20 ms
PAUSE_S = 0.6
WHOLE = ["The birch canoe slid on the smooth planks.", "Rice is often served in round bowls.",
         "The juice of lemons makes fine punch.", "Four hours of steady work faced us.",
         "A large size in stockings is hard to sell."]
PAUSED = [("I would like to book a table,", "for two people at eight tonight."),
          ("Could you tell me,", "which platform the next train leaves from?"),
          ("My order number is four two seven,", "and it has not arrived yet."),
          ("Well, I think", "the blue one would be better."),
          ("First, turn off the power,", "then open the cover slowly.")]


def strategies() -> dict:
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
    from pipecat.turns.user_stop.speech_timeout_user_turn_stop_strategy import SpeechTimeoutUserTurnStopStrategy
    from pipecat.turns.user_stop.turn_analyzer_user_turn_stop_strategy import TurnAnalyzerUserTurnStopStrategy

    out = {f"VAD stop 0.2 s + speech timeout {t} s":
           (lambda t=t: SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=t, wait_for_transcript=False))
           for t in (0.1, 0.25, 0.4, 0.7)}
    out["smart-turn v3 (pipecat's bundled model) after VAD stop 0.2 s"] = lambda: TurnAnalyzerUserTurnStopStrategy(
        turn_analyzer=LocalSmartTurnAnalyzerV3(), wait_for_transcript=False)
    return out


async def _one(make_stop, parts: list[np.ndarray]) -> dict:
    """Feeds [silence, part, pause, part, ..., silence] in real time; the turn ends it saw."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.audio.vad.vad_analyzer import VADParams
    from pipecat.frames.frames import InputAudioRawFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.processors.filters.identity_filter import IdentityFilter
    from pipecat.turns.user_start.vad_user_turn_start_strategy import VADUserTurnStartStrategy
    from pipecat.turns.user_turn_strategies import UserTurnStrategies
    from pipecat.workers.runner import WorkerRunner

    source = IdentityFilter()
    pair = LLMContextAggregatorPair(LLMContext(), user_params=LLMUserAggregatorParams(
        vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=0.2)),
        user_turn_strategies=UserTurnStrategies(start=[VADUserTurnStartStrategy()], stop=[make_stop()])))
    user = pair.user()
    ends: list[float] = []

    @user.event_handler("on_user_turn_stopped")
    async def _stopped(_aggregator, _strategy, _message):
        ends.append(time.monotonic())

    worker = PipelineWorker(Pipeline([source, user]), params=PipelineParams(audio_in_sample_rate=RATE),
                            enable_rtvi=False, idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await asyncio.sleep(0.5)
    silence = np.zeros(int(0.5 * RATE), dtype=np.int16)
    pause = np.zeros(int(PAUSE_S * RATE), dtype=np.int16)
    timeline = [silence]
    for i, part in enumerate(parts):
        timeline += [part] + ([pause] if i + 1 < len(parts) else [])
    timeline.append(np.zeros(int(2.5 * RATE), dtype=np.int16))
    audio = np.concatenate(timeline)
    last_part_start = sum(len(x) for x in timeline[:-2]) if len(parts) > 1 else None
    speech_end = sum(len(x) for x in timeline[:-1]) - len(parts[-1]) + int(speech_end_s(parts[-1], RATE) * RATE)
    start, marks = time.monotonic(), {}
    for k in range(0, len(audio), FRAME):
        await asyncio.sleep(max(0.0, start + k / RATE - time.monotonic()))
        if last_part_start is not None and k <= last_part_start < k + FRAME:
            marks["last_part"] = time.monotonic()
        if k <= speech_end < k + FRAME:
            marks["speech_end"] = time.monotonic()
        await source.queue_frame(InputAudioRawFrame(audio=audio[k:k + FRAME].tobytes(), sample_rate=RATE,
                                                    num_channels=1))
    await worker.cancel()
    await running
    cut_in = bool(ends) and "last_part" in marks and ends[0] < marks["last_part"]
    final = [e for e in ends if e >= marks["speech_end"]]
    return {"cut_in": cut_in, "latency_s": round(final[0] - marks["speech_end"], 3) if final else None}


async def compare() -> dict:
    whole = [[speak(t, RATE)] for t in WHOLE]
    paused = [[speak(a, RATE), speak(b, RATE)] for a, b in PAUSED]
    report = {"pause_s": PAUSE_S, "utterances": len(whole) + len(paused), "strategies": {}}
    for name, make in strategies().items():
        runs = [await _one(make, parts) for parts in whole + paused]
        latencies = [r["latency_s"] for r in runs if r["latency_s"] is not None and not r["cut_in"]]
        report["strategies"][name] = {
            "false_cut_ins": sum(r["cut_in"] for r in runs), "of_paused": len(paused),
            "latency_p50_s": round(float(np.percentile(latencies, 50)), 3) if latencies else None,
            "latency_max_s": max(latencies) if latencies else None, "runs": runs}
        print(name, {k: v for k, v in report["strategies"][name].items() if k != "runs"}, flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("turn-taking.json"))
    args = p.parse_args(argv)
    report = asyncio.run(compare())
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
