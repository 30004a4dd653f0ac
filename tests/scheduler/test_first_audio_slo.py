"""First-audio SLO admission: a stream that would wait for a slot past the SLO is refused at once.
Pure Python: the admission alone, then the scheduler on the fake loop under an overload."""

from __future__ import annotations

import re

import pytest

from tts_engine.prompt import Layout
from tts_engine.scheduler.admission import Admission
from tts_engine.scheduler.config import SchedulerConfig

from .fake_runner import FakeLoop, Rejected


def full(adm: Admission, now: float) -> None:
    with adm.lock:
        for _ in range(adm.max_active):
            assert adm.try_admit(now).admitted


def test_with_no_finish_seen_a_stream_that_must_queue_is_refused():
    adm = Admission(max_active=2, max_queued=10, reject_predicted_underrun=False, first_audio_slo_s=0.1)
    full(adm, 0.0)
    with adm.lock:
        refused = adm.try_admit(0.0)
    assert not refused.admitted and "first-audio SLO of 100 ms" in refused.reason
    assert refused.retry_after_s >= 1.0
    assert adm.counts["rejected_slo"] == 1 and adm.counts["rejected_caps"] == 0


def test_the_queue_is_as_long_as_the_finish_rate_allows_within_the_slo():
    adm = Admission(max_active=2, max_queued=10, reject_predicted_underrun=False, first_audio_slo_s=0.1)
    # 100 finishes over the last second: a slot every 10 ms on average
    for i in range(100):
        with adm.lock:
            assert adm.try_admit(i / 100).admitted
        adm.release(i / 100 + 0.001)
    adm.observe_first_audio(0.02)  # one reading of slot -> first audio: the mean moves a fifth of the way
    assert adm.slot_to_audio_s == pytest.approx(0.004)
    for i in range(60):  # 10 and 30 ms in turn: mean 20, mean deviation 10
        adm.observe_first_audio(0.01 if i % 2 else 0.03)
    assert adm.slot_to_audio_s == pytest.approx(0.02, abs=0.002)
    assert adm.slot_to_audio_high_s() == pytest.approx(0.04, abs=0.003)
    full(adm, 1.0)
    with adm.lock:
        # k streams ahead: a p95 wait of 30 / 48 / 65 ms for k = 1 / 2 / 3, + 40 ms to first audio
        decisions = [adm.try_admit(1.0) for _ in range(4)]
    assert [d.admitted for d in decisions] == [True, True, False, False]
    assert re.search(r"3 streams must finish first: first audio ~10\d ms", decisions[2].reason), decisions[2]


def test_off_the_queue_fills_to_the_caps():
    adm = Admission(max_active=2, max_queued=3, reject_predicted_underrun=False, first_audio_slo_s=0.0)
    with adm.lock:
        decisions = [adm.try_admit(0.0) for _ in range(6)]
    assert [d.admitted for d in decisions] == [True] * 5 + [False]
    assert "capacity" in decisions[-1].reason


def test_the_slo_must_not_be_negative():
    with pytest.raises(ValueError, match="first_audio_slo_s"):
        SchedulerConfig(first_audio_slo_s=-0.1).validate()


def first_audio_waits(slo_s: float) -> tuple[list[float], int]:
    """An arrival every engine step (100 a second) into 4 slots that free ~6 streams a second:
    (each admitted stream's wait from arrival to first audio, the streams refused)."""
    loop = FakeLoop(SchedulerConfig(max_active_streams=4, max_queued_streams=64, first_audio_slo_s=slo_s,
                                    codec_tick_steps=0))
    refused = 0
    for i in range(300):
        try:
            loop.open(f"s{i}", tokens=5, forced=60)
        except Rejected as e:
            refused += 1
            assert e.retry_after_s >= 1.0
        loop.step()
        loop.assert_invariants()
    loop.run()
    loop.assert_empty()
    waits = [s.first_audio_at - s.arrival for s in loop.states.values()]
    return sorted(waits), refused


def test_past_capacity_admitted_streams_keep_the_slo_and_the_rest_are_refused():
    waits, refused = first_audio_waits(0.1)
    assert refused > 200
    p95 = waits[int(0.95 * (len(waits) - 1))]
    assert p95 <= 0.1, waits
    # the same overload with the SLO off: the queue fills and first audio waits seconds
    waits_off, refused_off = first_audio_waits(0.0)
    assert waits_off[-1] > 2.0 and refused_off < refused


def test_streams_waiting_for_their_text_hold_no_place_in_the_slot_queue():
    """Contexts opened ahead of their text (an agent's next turn) take no slot, so they do not count
    as streams that must finish before a new one gets a slot."""
    loop = FakeLoop(SchedulerConfig(max_active_streams=2, max_queued_streams=8, first_audio_slo_s=0.1))
    for i in range(3):
        loop.open(f"idle{i}", tokens=0, ended=False, layout=Layout.STREAMING)
    assert loop.sched.admission.waiting_text == 3
    loop.open("a", tokens=5)
    loop.open("b", tokens=5)
    with pytest.raises(Rejected, match="1 streams must finish first"):  # both slots are taken now
        loop.open("c", tokens=5)
    loop.append("idle0", 5)  # its text comes: it queues for a slot
    loop.abort("idle1")
    assert loop.sched.admission.waiting_text == 1
    loop.assert_invariants()
    loop.append("idle2", 5)
    for sid in ("idle0", "idle2"):
        loop.end(sid)
    loop.run()
    loop.assert_empty()
    assert loop.sched.admission.waiting_text == 0
