"""Zero-buffer playout on chunk timings whose underruns are known by hand."""

from __future__ import annotations

import pytest

from bench.load.playout import Chunk, play_time_of_sample, simulate

SR = 1000  # 1 sample = 1 ms keeps the arithmetic readable


def test_chunks_in_time_play_back_to_back_without_underrun():
    chunks = [Chunk(0.100, 80), Chunk(0.150, 80), Chunk(0.200, 160), Chunk(0.300, 160)]
    play = simulate(chunks, SR)
    assert play.start_s == 0.100
    assert play.underruns == 0 and play.stall_total_s == 0 and play.stall_max_s == 0
    assert play.chunk_starts_s == pytest.approx([0.100, 0.180, 0.260, 0.420])
    assert play.end_s == pytest.approx(0.580)
    assert play.samples == 480


def test_a_late_chunk_stalls_and_shifts_the_clock():
    # deadline after chunk 0: 0.18; chunk 1 (0.15) is early -> plays 0.18..0.26; chunk 2 arrives
    # at 0.40: 0.14 s of silence; the clock shifts, so chunk 3 is judged against 0.56, not 0.42.
    chunks = [Chunk(0.10, 80), Chunk(0.15, 80), Chunk(0.40, 160), Chunk(0.55, 80), Chunk(0.70, 40)]
    play = simulate(chunks, SR)
    assert play.underruns == 2
    (s1, s2) = play.stalls
    assert (s1.at_s, s1.length_s, s1.chunk) == pytest.approx((0.26, 0.14, 2))
    # chunk 3 (0.55) is in time for 0.56; chunk 4 arrives at 0.70 > 0.64: a 0.06 s stall.
    assert (s2.at_s, s2.length_s, s2.chunk) == pytest.approx((0.64, 0.06, 4))
    assert play.stall_total_s == pytest.approx(0.20)
    assert play.stall_max_s == pytest.approx(0.14)
    assert play.end_s == pytest.approx(0.74)


def test_any_lateness_counts_but_arriving_exactly_on_the_deadline_does_not():
    assert simulate([Chunk(0.0, 100), Chunk(0.1, 100)], SR).underruns == 0
    late = simulate([Chunk(0.0, 100), Chunk(0.1 + 1e-9, 100)], SR)
    assert late.underruns == 1 and late.stall_total_s == pytest.approx(1e-9, abs=1e-12)


def test_playback_starts_at_the_first_playable_chunk():
    # A read that completes no whole sample (a lone byte) does not start playback.
    play = simulate([Chunk(0.05, 0), Chunk(0.09, 10), Chunk(0.095, 10)], SR)
    assert play.start_s == 0.09 and play.underruns == 0 and play.end_s == pytest.approx(0.11)
    assert simulate([], SR).start_s is None
    assert simulate([Chunk(0.05, 0)], SR).end_s is None


def test_play_time_of_a_sample_includes_stalls_before_it():
    chunks = [Chunk(0.10, 80), Chunk(0.15, 80), Chunk(0.40, 160)]
    play = simulate(chunks, SR)
    assert play_time_of_sample(play, chunks, 0, SR) == pytest.approx(0.10)
    assert play_time_of_sample(play, chunks, 79, SR) == pytest.approx(0.179)
    assert play_time_of_sample(play, chunks, 80, SR) == pytest.approx(0.18)
    assert play_time_of_sample(play, chunks, 170, SR) == pytest.approx(0.41)  # after the 0.14 s stall
    assert play_time_of_sample(play, chunks, 320, SR) is None  # past the end
