"""The incremental recogniser (agent/stt.py) on real speech (espeak-ng), under pipecat's test
harness: a draft at the pause after the speech becomes the final transcript at the VAD's stop,
with no second Whisper run; speech after the draft gets a run of its own at the stop."""

from __future__ import annotations

import subprocess
import sys
import wave

import numpy as np
import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from agent.pipeline import AgentConfig
from agent.stt import IncrementalWhisperSTT, bundled_whisper_model, load_whisper, make_stt, transcribe_utterance

from .helpers import run

RATE = 16000


def words(text: str) -> set[str]:
    return set("".join(c for c in text.lower() if c.isalpha() or c.isspace()).split())


def espeak(text: str, tmp_path) -> np.ndarray:
    """`text` read by espeak-ng, int16 mono at 16 kHz."""
    import soxr

    path = tmp_path / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, timeout=30)
    with wave.open(str(path)) as w:
        rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    audio = soxr.resample(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768, rate, RATE)
    return (audio * 32767).astype(np.int16)


def audio_frames(samples: np.ndarray) -> list:
    return [InputAudioRawFrame(audio=samples[k:k + 320].tobytes(), sample_rate=RATE, num_channels=1)
            for k in range(0, len(samples), 320)]


class CountingSTT(IncrementalWhisperSTT):
    """The service, counting its Whisper runs."""

    runs = 0

    def _transcribe(self, pcm16: bytes) -> str:
        type(self).runs += 1
        return super()._transcribe(pcm16)


def stt(counting: bool = True) -> IncrementalWhisperSTT:
    model = bundled_whisper_model()
    cls = CountingSTT if counting else IncrementalWhisperSTT
    CountingSTT.runs = 0
    return cls(device="cpu", compute_type="int8", trailing_silence_secs=0,
               settings=IncrementalWhisperSTT.Settings(model=model))


@pytest.fixture(scope="module")
def question(tmp_path_factory) -> np.ndarray:
    return espeak("What is the capital of France?", tmp_path_factory.mktemp("speech"))


def test_the_short_window_recogniser_hears_a_question(question):
    whisper = load_whisper(bundled_whisper_model(), "cpu", "int8")
    audio = question.astype(np.float32) / 32768
    assert {"capital", "france"} <= words(transcribe_utterance(whisper, audio)), "10 s window"
    assert {"capital", "france"} <= words(transcribe_utterance(whisper, audio, window_s=None)), "30 s window"
    # Silence is no speech: the window's padding is not filled with words.
    assert transcribe_utterance(whisper, np.zeros(RATE, dtype=np.float32)) == ""


def test_whisper_runs_at_once_follow_the_setting_and_share_the_threads():
    code = ("import faster_whisper, agent.stt as s\n"
            "seen, real = {}, faster_whisper.WhisperModel\n"
            "faster_whisper.WhisperModel = lambda *a, **k: seen.update(k) or real(*a, **k)\n"
            "s.STT_WORKERS = 2; s.os.cpu_count = lambda: 8\n"
            "w = s.load_whisper(s.bundled_whisper_model(), 'cpu', 'int8')\n"
            "print(w.model.num_workers, seen['cpu_threads'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split()[-2:] == ["2", "2"]  # two runs at once, four threads shared out
    assert load_whisper(bundled_whisper_model(), "cpu", "int8").model.num_workers == 1  # the default


def test_the_local_stt_is_the_incremental_one():
    assert isinstance(make_stt(AgentConfig()), IncrementalWhisperSTT)


def test_whisper_takes_the_gpu_only_where_it_runs_there(monkeypatch):
    import ctranslate2

    from agent import stt

    model = bundled_whisper_model()
    stt.runs_on_gpu.cache_clear()
    assert stt.whisper_setup(AgentConfig()) == (model, "cpu", "int8")  # no CUDA device here
    assert stt.whisper_device_label(AgentConfig()) == "cpu"
    # A device CTranslate2 sees but cannot run on (here: no driver; on a CUDA 13 box: no cuBLAS 12):
    # the load fails and the CPU takes over rather than the agent failing its first call.
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    stt.runs_on_gpu.cache_clear()
    assert stt.whisper_device_label(AgentConfig()) == "auto"  # known once the model has loaded
    assert stt.whisper_setup(AgentConfig()) == (model, "cpu", "int8")
    assert stt.whisper_setup(AgentConfig(whisper_device="cuda")) == (model, "cuda", "float16")  # asked for
    stt.runs_on_gpu.cache_clear()
    with pytest.raises(ValueError, match="whisper_device must be one of auto, cpu, cuda"):
        AgentConfig(whisper_device="gpu").validate()


@pytest.mark.slow
def test_a_draft_at_the_pause_is_the_final_transcript(question):
    """Speech, then 0.3 s of quiet (a draft starts after PAUSE_S), time for the drafts, then the
    VAD's stop: the last draft (shown as an interim) is the final transcript, with no run at the
    stop. (espeak-ng's gaps between words may start an earlier draft of part of the question.)"""
    silence = np.zeros(int(0.3 * RATE), dtype=np.int16)
    frames = [VADUserStartedSpeakingFrame(start_secs=0.2), *audio_frames(question), *audio_frames(silence),
              SleepFrame(sleep=4.0), VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.5)]
    down, _ = run(run_test(stt(), frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=RATE)))
    finals = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    interims = [f.text for f in down if isinstance(f, InterimTranscriptionFrame)]
    assert len(finals) == 1 and {"capital", "france"} <= words(finals[0]), finals
    assert interims[-1] == finals[0]
    assert CountingSTT.runs == len(interims)


@pytest.mark.slow
def test_speech_after_the_draft_is_transcribed_at_the_stop(question, tmp_path):
    """A pause (a draft of the first half), more speech, the stop: the final transcript has both
    halves, from a second run."""
    more = espeak("And how far is the moon?", tmp_path)
    pause = np.zeros(int(0.3 * RATE), dtype=np.int16)
    frames = [VADUserStartedSpeakingFrame(start_secs=0.2), *audio_frames(question), *audio_frames(pause),
              SleepFrame(sleep=3.0), *audio_frames(more), VADUserStoppedSpeakingFrame(stop_secs=0.2),
              SleepFrame(sleep=4.0)]
    down, _ = run(run_test(stt(), frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=RATE)))
    (final,) = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    assert {"capital", "france", "moon"} <= words(final), final
    interims = [f.text for f in down if isinstance(f, InterimTranscriptionFrame)]
    assert interims and "moon" not in words(" ".join(interims)), interims
    # The drafts shown, any draft still running at the stop (dropped), and the run at the stop.
    assert CountingSTT.runs > len(interims)
