"""Audible onset on synthetic signals whose onset is known."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench.load.onset import OnsetTracker, audible_onset, pcm16_to_float, window_dbfs
from bench.load.records import Exchange

SR = 24000
HOP = 240
WIN = 480


def tone(seconds: float, dbfs: float, freq: float = 440.0, sr: int = SR) -> np.ndarray:
    """A sine whose RMS is `dbfs` (RMS of a sine = amplitude / sqrt 2)."""
    t = np.arange(round(seconds * sr)) / sr
    return np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * freq * t + 0.3)


def reference_onset(x: np.ndarray, sr: int, threshold: float = -45.0) -> int | None:
    """The definition written out with loops, to check the vectorised one."""
    win, hop = round(0.02 * sr), round(0.01 * sr)
    loud = []
    for start in range(0, len(x) - win + 1, hop):
        w = x[start:start + win] - x[start:start + win].mean()
        rms = np.sqrt(np.mean(w ** 2))
        loud.append(rms > 0 and 20 * np.log10(rms) >= threshold)
    for i in range(len(loud) - 1):
        if loud[i] and loud[i + 1]:
            return i * hop
    return None


def test_silence_then_tone_onset_is_the_first_window_that_reaches_the_tone():
    onset_at = 12_000  # 0.5 s, a multiple of the hop
    x = np.concatenate([np.zeros(onset_at), tone(1.0, -20)])
    # Windows overlap: the first window holding enough tone starts one hop before the tone.
    assert audible_onset(x, SR) == onset_at - HOP
    # Shifted by a few samples, it stays within the window that first reaches the tone.
    y = np.concatenate([np.zeros(onset_at + 100), tone(1.0, -20)])
    assert audible_onset(y, SR) == onset_at - HOP


def test_silence_noise_dc_and_short_signals_have_no_onset():
    assert audible_onset(np.zeros(SR), SR) is None
    assert audible_onset(np.full(SR, 0.5), SR) is None  # DC offset: removed per window
    assert audible_onset(tone(0.019, -10), SR) is None  # shorter than one window
    assert audible_onset(np.array([]), SR) is None


def test_threshold_is_minus_45_dbfs_rms():
    assert audible_onset(tone(0.5, -44.5), SR) == 0
    assert audible_onset(tone(0.5, -45.5), SR) is None
    assert audible_onset(tone(0.5, -45.5), SR, threshold_dbfs=-46) == 0


def test_one_loud_window_is_not_enough_two_are():
    # Windows overlap by a hop, so a sample lies in two windows, except in the first hop of the
    # signal, which only window 0 covers: a click there makes exactly one loud window.
    x = np.zeros(SR)
    x[10] = 0.9
    assert (window_dbfs(x, SR) >= -45).sum() == 1
    assert audible_onset(x, SR) is None
    x[10] = 0.0
    x[5000] = 0.9  # in windows 19 ([4560, 5040)) and 20 ([4800, 5280)): an onset at window 19
    assert (window_dbfs(x, SR) >= -45).sum() == 2
    assert audible_onset(x, SR) == 4560


def test_burst_then_silence_then_speech_picks_the_burst_only_if_two_windows_hear_it():
    rng = np.random.default_rng(3)
    x = np.zeros(2 * SR)
    x[SR:] = rng.normal(0, 0.05, SR)  # speech-like noise from 1.0 s
    x[100] = 0.003  # a tiny tick: 0.003 / sqrt(480) is far below -45 dBFS
    assert audible_onset(x, SR) == SR - HOP


@pytest.mark.parametrize("seed", range(20))
def test_matches_the_loop_definition_on_random_envelopes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(400, 6000))
    level = 10 ** (rng.uniform(-60, -30, size=n // 100 + 1) / 20)
    x = rng.normal(0, 1, n) * np.repeat(level, 100)[:n] + rng.uniform(-0.1, 0.1)  # plus a DC offset
    assert audible_onset(x, SR) == reference_onset(x, SR)
    assert audible_onset(x, 16000) == reference_onset(x, 16000)


def test_pcm16_bytes_decode_to_unit_floats():
    pcm = np.array([0, 16384, -32768, 32767], dtype="<i2").tobytes()
    np.testing.assert_allclose(pcm16_to_float(pcm), [0.0, 0.5, -1.0, 32767 / 32768])


@pytest.mark.parametrize("seed", range(30))
def test_streaming_tracker_equals_the_whole_signal_definition(seed):
    rng = np.random.default_rng(100 + seed)
    sr = (24000, 16000)[seed % 2]
    n = int(rng.integers(0, 9000))
    level = 10 ** (rng.uniform(-60, -30, size=n // 100 + 1) / 20)
    x = (rng.normal(0, 1, n) * np.repeat(level, 100)[:n]).astype(np.float32)
    tracker = OnsetTracker(sr)
    i = 0
    while i < n:  # arbitrary read sizes, down to a single sample
        k = int(rng.integers(1, 1500))
        tracker.feed(x[i:i + k])
        i += k
    assert tracker.onset == audible_onset(x, sr)


def test_exchange_reassembles_samples_split_across_reads_and_keeps_audio_only_on_request():
    x = np.concatenate([np.zeros(2400), 0.3 * np.sin(np.arange(4800) / 5)])
    pcm = (x * 32767).astype("<i2").tobytes()
    for keep in (False, True):
        ex = Exchange(SR, keep_pcm=keep, t0=100.0)
        cuts = [0, 1, 1001, 1002, 7777, len(pcm)]  # odd cuts split samples
        for k, (a, b) in enumerate(itertools.pairwise(cuts)):
            ex.add_pcm(pcm[a:b], 100.0 + k * 0.01)
        assert [c.samples for c in ex.chunks] == [0, 500, 1, 3387, (len(pcm) - 7777 + 1) // 2]
        assert sum(c.samples for c in ex.chunks) == len(x)
        assert ex.chunks[2].at_s == pytest.approx(0.02)
        assert ex.onset_sample == audible_onset(x, SR) == 2400 - HOP
        assert bytes(ex.pcm) == (pcm if keep else b"")
