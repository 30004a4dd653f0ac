"""The playout buffer and its DAC clock, driven the way PortAudio's output callback drives it."""

from __future__ import annotations

import numpy as np
import pytest

from transports.local.clock import PlayoutBuffer

SR = 1000  # 1 sample = 1 ms keeps the arithmetic readable


def block(n: int) -> np.ndarray:
    return np.zeros((n, 1), dtype=np.float32)


def ramp(n: int, start: int = 0) -> np.ndarray:
    return (np.arange(start, start + n, dtype=np.float32) + 1) / 10_000


def test_played_position_follows_the_dac_not_the_written_audio():
    buf = PlayoutBuffer(SR, prefill_s=0.0)
    buf.write(ramp(500), now=0.0)
    out = block(100)
    buf.fill(out, dac_delay_s=0.2, now=1.0)  # these 100 samples reach the DAC at 1.2
    assert np.allclose(out[:, 0], ramp(100))
    assert buf.written == 500
    assert buf.played(1.0) == 0  # handed over, not yet heard
    assert buf.played(1.25) == 50
    assert buf.played(1.5) == 100  # no more was taken
    buf.fill(out, dac_delay_s=0.2, now=1.1)
    assert buf.played(1.35) == 150
    assert np.allclose(out[:, 0], ramp(100, 100))


def test_a_larger_output_latency_plays_the_same_audio_later():
    fast, slow = PlayoutBuffer(SR, prefill_s=0.0), PlayoutBuffer(SR, prefill_s=0.0)
    for buf, delay in ((fast, 0.02), (slow, 0.5)):
        buf.write(ramp(300), now=0.0)
        for k in range(3):
            buf.fill(block(100), dac_delay_s=delay, now=k * 0.1)
    assert fast.played(0.3) == 280 and slow.played(0.3) == 0
    assert slow.played(0.6) == 100 and slow.played(0.82) == 300


def test_a_late_chunk_is_silence_then_plays_never_an_error():
    buf = PlayoutBuffer(SR, prefill_s=0.03)
    buf.write(ramp(50), now=0.0)
    out = block(40)
    buf.fill(out, 0.0, now=0.001)
    assert np.allclose(out[:, 0], ramp(40))
    buf.fill(out, 0.0, now=0.041)  # 10 left, then the buffer runs dry while audio is still due
    assert np.allclose(out[:10, 0], ramp(10, 40)) and not out[10:].any()
    buf.write(ramp(10, 50), now=0.05)  # the late chunk, shorter than the prefill: wait for more
    assert buf.underruns == 1
    buf.fill(out, 0.0, now=0.06)
    assert not out.any() and buf.played(0.06) == 50
    buf.write(ramp(30, 60), now=0.065)
    buf.fill(out, 0.0, now=0.07)
    assert np.allclose(out[:, 0], ramp(40, 50))
    assert buf.underruns == 1  # the wait before playing again is not another underrun


def test_the_tail_of_an_utterance_shorter_than_the_prefill_still_plays():
    buf = PlayoutBuffer(SR, prefill_s=0.03)
    buf.write(ramp(10), now=0.0)
    out = block(20)
    buf.fill(out, 0.0, now=0.01)
    assert not out.any()  # still arriving, maybe
    buf.fill(out, 0.0, now=0.04)  # nothing written for the prefill time: it is the tail
    assert np.allclose(out[:10, 0], ramp(10))
    buf.write(ramp(10), now=1.0)  # the next utterance, long after: not an underrun
    assert buf.underruns == 0


def test_clear_drops_what_was_not_played():
    buf = PlayoutBuffer(SR, prefill_s=0.0)
    buf.write(ramp(100), now=0.0)
    buf.fill(block(30), 0.0, now=0.0)
    buf.clear()
    assert buf.buffered() == 0
    out = block(30)
    buf.fill(out, 0.0, now=0.03)
    assert not out.any()
    buf.write(ramp(20), now=0.05)
    assert buf.written == 120  # positions go on after the dropped audio


def test_writes_wrap_around_the_ring_and_overflow_is_refused():
    buf = PlayoutBuffer(SR, capacity_s=0.1, prefill_s=0.0)
    out = block(60)
    for k in range(5):
        buf.write(ramp(60, 60 * k), now=k)
        buf.fill(out, 0.0, now=k)
        assert np.allclose(out[:, 0], ramp(60, 60 * k))
    buf.write(ramp(100), now=9)
    with pytest.raises(ValueError, match="do not fit"):
        buf.write(ramp(1), now=9)


def test_audible_until_and_onset_come_from_the_dac_times():
    buf = PlayoutBuffer(SR, prefill_s=0.0)
    assert buf.audible_until() == 0.0 and buf.onset_after(0.0) is None
    buf.fill(block(100), 0.3, now=1.0)  # nothing written: no position, no onset
    voice = np.concatenate((np.zeros(20, np.float32), np.full(130, 0.2, np.float32)))  # starts quiet
    buf.write(voice, now=1.05)
    buf.fill(block(100), 0.3, now=1.1)
    assert buf.onset_after(1.0) == pytest.approx(1.4 + 0.02)  # the first audible sample
    assert buf.onset_after(1.5) is None
    assert buf.audible_until() == pytest.approx(1.4 + 0.15)


@pytest.mark.parametrize("kwargs", [{"sample_rate": 0}, {"sample_rate": 16000, "prefill_s": -1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        PlayoutBuffer(**kwargs)
