"""agent/resample.py: the engine's 24 kHz audio at a phone line's 8 kHz, chunk by chunk."""

import numpy as np

from agent.resample import UtteranceResampler

CHUNK = 1920  # the engine's first chunk: one 80 ms frame at 24 kHz


def tone(hz: float, seconds: float) -> np.ndarray:
    t = np.arange(int(24000 * seconds)) / 24000
    return (0.5 * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def level_db(pcm: bytes) -> float:
    x = np.frombuffer(pcm, dtype=np.int16).astype(float)[400:-400]
    return 20 * np.log10(np.sqrt(np.mean(x ** 2)) / (0.5 * 32767 / np.sqrt(2)) + 1e-12)


def through(x: np.ndarray) -> list[bytes]:
    r = UtteranceResampler(24000, 8000)
    return [r(x[i:i + CHUNK].tobytes()) for i in range(0, len(x), CHUNK)] + [r.flush()]


def test_the_first_chunk_comes_out_at_once():
    # The phone transport sends 40 ms chunks: the first must be there before the engine's second chunk.
    first = through(tone(440, 0.08))[0]
    assert len(first) / 2 / 8000 >= 0.06


def test_no_audio_is_lost_or_added():
    x = tone(440, 1.0)
    out = b"".join(through(x))
    assert abs(len(out) // 2 - len(x) // 3) <= 1


def test_speech_band_passes_and_nothing_above_the_line_folds_into_it():
    assert abs(level_db(b"".join(through(tone(1000, 1.0))))) < 0.5
    assert level_db(b"".join(through(tone(3400, 1.0)))) > -1.0  # the telephone band's top
    assert level_db(b"".join(through(tone(5000, 1.0)))) < -60  # above 4 kHz: filtered, not aliased to 3 kHz
