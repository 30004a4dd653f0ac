"""The echo policy: the gate mutes the microphone while the bot is audible; WebRTC's canceller
(aec-audio-processing) removes a delayed, quieter copy of the bot's speech (espeak-ng) from the
microphone and leaves the user's own speech through; the far end is paired with the microphone
by the sound card's timestamps, whatever the streams' start times."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import soundfile as sf
import soxr

from agent.stt import bundled_whisper_model, load_whisper
from transports.local.echo import AEC_FRAME, EchoCanceller, EchoGate

RATE = 16000


def speech(text: str, tmp_path) -> np.ndarray:
    if shutil.which("espeak-ng") is None:
        pytest.fail("needs espeak-ng (apt-get install espeak-ng)")
    wav = tmp_path / "speech.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), text], check=True)
    x, sr = sf.read(wav, dtype="float32")
    return (soxr.resample(x, sr, RATE) * 0.8 * 32767).astype(np.int16)


def db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-9))


def run_aec(far: np.ndarray, near: np.ndarray, block: int = 320, *, far_lead_s: float = 0.0) -> np.ndarray:
    """Both streams in blocks as the callbacks deliver them; the far end's blocks are handed over
    `far_lead_s` early (an output stream that runs ahead), stamped with their true DAC times."""
    aec, out = EchoCanceller(), []
    lead = round(far_lead_s * RATE / block)
    for i in range(0, len(near) - block + 1, block):
        j = i + lead * block
        if j + block <= len(far):
            aec.add_far(far[j:j + block], dac_at=j / RATE)
        out.append(aec.process(near[i:i + block], adc_at=i / RATE))
    return np.concatenate(out)


def test_the_gate_mutes_the_microphone_until_the_bot_is_no_longer_audible():
    audible_until = [10.0]
    gate = EchoGate(lambda: audible_until[0], tail_s=0.3)
    mic = np.full(160, 1000, dtype=np.int16)
    assert not gate.process(mic, now=9.0).any()
    assert not gate.process(mic, now=10.25).any()  # the room's tail
    assert np.array_equal(gate.process(mic, now=10.35), mic)
    with pytest.raises(ValueError):
        EchoGate(lambda: 0.0, tail_s=-1)


@pytest.mark.parametrize("far_lead_s", [0.0, 0.3])
def test_the_canceller_removes_the_bots_echo(tmp_path, far_lead_s):
    bot = speech("This is the bot speaking through the loudspeaker of a laptop. The microphone hears it "
                 "again, a little later and a little quieter, and the echo canceller has to remove it.", tmp_path)
    delay = int(0.12 * RATE)  # speaker latency + air + microphone latency
    echo = (np.concatenate((np.zeros(delay), bot[:-delay])) * 0.5).astype(np.int16)
    cleaned = run_aec(bot, echo, far_lead_s=far_lead_s)
    assert len(cleaned) == len(echo) // 320 * 320  # whole 10 ms frames, none lost
    half = len(cleaned) // 2  # the adaptive filter converges in the first half
    assert db(echo[half:len(cleaned)]) - db(cleaned[half:]) > 25  # echo return loss enhancement, dB


def test_the_users_own_speech_goes_through(tmp_path):
    user = speech("I would like to book a table for two people tomorrow evening.", tmp_path)
    silence = np.zeros_like(user)  # the bot is quiet: nothing to cancel
    cleaned = run_aec(silence, user, block=AEC_FRAME * 3)
    n = len(cleaned)
    assert abs(db(user[:n]) - db(cleaned)) < 3
    segments, _ = load_whisper(bundled_whisper_model(), "cpu", "int8").transcribe(cleaned / 32768, language="en")
    assert "book a table for two people" in " ".join(s.text for s in segments).lower()


def test_odd_block_sizes_are_kept_until_a_whole_frame_is_there():
    aec = EchoCanceller()
    assert len(aec.process(np.ones(100, dtype=np.int16), adc_at=0.0)) == 0
    assert len(aec.process(np.ones(100, dtype=np.int16), adc_at=0.00625)) == AEC_FRAME
    assert len(aec.process(np.ones(120, dtype=np.int16), adc_at=0.0125)) == AEC_FRAME


class Pairs:
    """A stand-in canceller that records which far samples were paired with which near ones."""

    def __init__(self):
        self.pairs: list[tuple[np.ndarray, np.ndarray]] = []

    def process(self, near: bytes, far: bytes) -> bytes:
        self.pairs.append((np.frombuffer(near, np.int16), np.frombuffer(far, np.int16)))
        return near


@pytest.mark.parametrize("far_lead_s", [0.0, 0.25, 1.0])
def test_each_near_frame_meets_the_far_audio_playing_when_it_was_captured(far_lead_s):
    clock = np.arange(3 * RATE, dtype=np.int16)  # sample k carries its own index: time = k / RATE
    pairs = Pairs()
    aec = EchoCanceller(pairs)
    lead = round(far_lead_s * RATE)
    aec.add_far(clock[lead:lead + RATE], dac_at=lead / RATE)  # a second handed over ahead of time
    aec.process(clock[:RATE // 2], adc_at=0.0)
    aec.add_far(clock[lead + RATE:], dac_at=(lead + RATE) / RATE)
    aec.process(clock[RATE // 2:RATE], adc_at=0.5)
    for near, far in pairs.pairs:
        if far.any():  # before the far end began: silence
            assert np.array_equal(near, far)


def test_until_the_canceller_has_adapted_the_microphone_is_muted_over_the_bots_voice():
    pairs = Pairs()  # passes the near end through: only the warm-up can mute it
    aec = EchoCanceller(pairs)
    bot = np.full(RATE * 3, 1000, dtype=np.int16)
    aec.add_far(bot, dac_at=0.0)
    out = aec.process(np.full(RATE * 3, 500, dtype=np.int16), adc_at=0.0)
    warm = round(EchoCanceller.WARMUP_S * RATE)
    assert not out[:warm - AEC_FRAME].any() and (out[warm + AEC_FRAME:] == 500).all()
