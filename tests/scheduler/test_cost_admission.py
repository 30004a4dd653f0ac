"""The online cost model and admission control (caps, predicted underrun, Retry-After)."""

from __future__ import annotations

import pytest

from tests.scheduler.fake_runner import BUCKETS, FakeCosts, FakeLoop, FakeRunner, Rejected
from tts_engine.scheduler.admission import Admission
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.scheduler.cost import OUTLIER_FACTOR, CostModel, CostSeeds
from tts_engine.scheduler.request import FRAME_S

# -- cost model -----------------------------------------------------------------------------------


def test_cost_model_starts_from_its_seeds_and_learns_by_ema():
    seeds = CostSeeds()
    cost = CostModel(BUCKETS, seeds, alpha=0.5)
    assert cost.frame_step_s(1) == pytest.approx(seeds.frame_base_s + seeds.frame_per_row_s)
    assert cost.frame_step_s(32) > cost.frame_step_s(1)
    assert cost.prefill_s(200) > cost.prefill_s(20)
    assert cost.chunk_s(12, 8) > cost.chunk_s(1, 1)
    before = cost.frame_step_s(1)
    cost.observe_frame_step(1, 0.030)
    assert cost.frame_step_s(1) == pytest.approx(before + 0.5 * (0.030 - before))
    for _ in range(30):
        cost.observe_frame_step(1, 0.030)
    assert cost.frame_step_s(1) == pytest.approx(0.030, rel=1e-3)
    # A bucket never measured follows the seed formula scaled by what the measured ones taught.
    assert cost.frame_step_s(32) > 3 * (seeds.frame_base_s + 32 * seeds.frame_per_row_s)
    for bad in (float("nan"), -1.0, float("inf")):
        cost.observe_frame_step(1, bad)  # ignored
    assert cost.frame_step_s(1) == pytest.approx(0.030, rel=1e-3)


def test_one_stretched_step_cannot_multiply_an_estimate_but_a_lasting_slowdown_shows():
    cost = CostModel(BUCKETS, alpha=0.2)
    for _ in range(20):
        cost.observe_frame_step(32, 0.005)
        cost.observe_chunk(2, 32, 0.007)
    settled = cost.frame_step_s(32)
    cost.observe_frame_step(32, 0.200)  # a host pause inside the step's device timer
    assert cost.frame_step_s(32) == pytest.approx(settled * (1 + 0.2 * (OUTLIER_FACTOR - 1)))
    assert cost.cycle_s(32, codec_tick=2) * 1.25 < FRAME_S  # admission still sees real time
    for _ in range(15):
        cost.observe_frame_step(32, 0.050)  # ten times slower for good
    assert cost.frame_step_s(32) == pytest.approx(0.050, rel=0.05)
    # The first measurement of a key is taken whole (seeds may be far off, e.g. on a CPU).
    before = cost.prefill_s(40)
    cost.observe_prefill(40, 0.5)
    assert cost.prefill_s(40) == pytest.approx(before + 0.2 * (0.5 - before))


def test_cycle_time_and_sustainable_streams():
    cost = CostModel(BUCKETS)
    assert cost.cycle_s(0) == 0.0
    assert cost.cycle_s(1) < cost.cycle_s(8) < cost.cycle_s(64)
    # Prefill load stretches the cycle; a device that only prefills has no cycle left.
    assert cost.cycle_s(8, arrivals_per_s=50) > cost.cycle_s(8)
    assert cost.cycle_s(8, arrivals_per_s=1e6) == float("inf")
    assert cost.sustainable_streams(32, 1.25) == 32  # H200 seeds: 32 streams are far inside real time
    # With the codec tick, every stream's few frames share one call every few steps.
    cost.observe_chunk(3, 32, 0.012)
    assert cost.cycle_s(32, codec_tick=3) == cost.frame_step_s(32) + cost.chunk_s(3, 32) / 3
    for b in BUCKETS:  # a device ten times slower than real time for one stream
        cost.observe_frame_step(b, 10 * FRAME_S)
    for _ in range(50):
        cost.observe_frame_step(1, 10 * FRAME_S)
    assert cost.sustainable_streams(32, 1.25) == 0


# -- admission ------------------------------------------------------------------------------------

def test_caps_admit_exactly_running_plus_queued():
    """SGLang's recipe: 1 running + 1 queued allowed, 10 at once -> exactly 2 admitted."""
    adm = Admission(max_active=1, max_queued=1, reject_predicted_underrun=False)
    with adm.lock:
        decisions = [adm.try_admit(0.0) for _ in range(10)]
    assert [d.admitted for d in decisions] == [True, True] + [False] * 8
    assert all(d.retry_after_s >= 1.0 and "capacity" in d.reason for d in decisions[2:])
    assert adm.counts == {"admitted": 2, "rejected": 8, "rejected_caps": 8, "rejected_underrun": 0, "rejected_slo": 0}
    adm.release(1.0)
    with adm.lock:
        assert adm.try_admit(1.0).admitted  # capacity is back
    adm.release(2.0)
    adm.release(3.0)
    with pytest.raises(RuntimeError):
        adm.release(4.0)


def test_retry_after_comes_from_the_finish_rate():
    adm = Admission(max_active=4, max_queued=0, reject_predicted_underrun=True)
    adm.publish_capacity(2)
    with adm.lock:
        assert adm.try_admit(0.0).admitted and adm.try_admit(0.0).admitted
        refused = adm.try_admit(0.0)
    assert not refused.admitted and "underrun" in refused.reason
    assert refused.retry_after_s == 1.0  # no finish seen yet: the floor
    # 5 streams finished in the last 10 s (0.5/s) and one must leave -> 2 s.
    for t in range(5):
        adm.release(float(t))
        with adm.lock:
            assert adm.try_admit(float(t)).admitted
    with adm.lock:
        refused = adm.try_admit(5.0)
    assert refused.retry_after_s == pytest.approx(2.0)
    assert adm.retry_after_s(1000, 5.0) == 30.0  # capped
    assert adm.retry_after_s(1, 100.0) == 1.0  # the finishes left the window


def slow_loop(reject: bool, frame_s: float) -> FakeLoop:
    costs = FakeCosts(frame_s=frame_s, prefill_s=0.001, chunk_s=0.001)
    cfg = SchedulerConfig(max_active_streams=16, max_queued_streams=16)
    return FakeLoop(cfg, runner=FakeRunner(costs=costs), reject_predicted_underrun=reject, buckets=(1, 2, 4, 8, 16))


def learn(loop: FakeLoop, frame_s: float, chunk_s: float) -> None:
    for _ in range(40):
        for b in loop.sched.buckets:
            loop.sched.cost.observe_frame_step(b, frame_s)
            loop.sched.cost.observe_chunk(12, b, chunk_s)
    loop.sched.publish_capacity()


def test_admission_rejects_a_stream_that_would_make_admitted_streams_underrun():
    # Measured: a frame step takes 30 ms at any batch size, a 12-frame codec call 60 ms. With a
    # 1.25 margin a cycle may take 64 ms; each stream adds 60 / 12 ms of codec work to it.
    loop = slow_loop(reject=True, frame_s=0.030)
    learn(loop, 0.030, 0.060)
    n = loop.sched.admission.sustainable
    assert n == 6
    assert loop.sched.cycle_s(n) * 1.25 <= FRAME_S < loop.sched.cycle_s(n + 1) * 1.25
    for i in range(n):
        loop.open(f"s{i}", forced=6)
    with pytest.raises(Rejected) as info:
        loop.open("late")
    assert "underrun" in str(info.value) and info.value.retry_after_s >= 1.0
    assert loop.sched.admission.counts["rejected_underrun"] == 1
    assert "late" not in loop.sched.streams  # refused before any state or work exists
    loop.run()
    loop.assert_empty()
    loop.open("later", forced=6)  # the admitted streams are gone: room again
    loop.run()


def test_admission_accepts_what_real_time_allows_and_can_be_switched_off():
    fast = slow_loop(reject=True, frame_s=0.004)
    learn(fast, 0.004, 0.004)
    assert fast.sched.admission.sustainable == 16
    for i in range(16):
        fast.open(f"s{i}", forced=4)
    with pytest.raises(Rejected, match="capacity"):  # past the slots, queue: 16 more, then caps
        for i in range(17):
            fast.open(f"q{i}", forced=4)
    fast.run()
    fast.assert_empty()
    off = slow_loop(reject=False, frame_s=0.030)
    learn(off, 0.030, 0.060)
    for i in range(16):
        off.open(f"s{i}", forced=4)  # a CPU engine: no prediction, only caps
    off.run()
    off.assert_empty()


def test_an_empty_engine_admits_even_when_the_prediction_says_nothing_is_real_time():
    # A 70 ms frame step (one bad measurement, or a slow GPU): no stream count keeps real time.
    loop = slow_loop(reject=True, frame_s=0.070)
    learn(loop, 0.070, 0.070)
    assert loop.sched.admission.sustainable == 0
    loop.open("first", forced=4)  # empty engine: admitted, so steps run and the estimate can move
    with pytest.raises(Rejected, match="underrun"):
        loop.open("second")
    loop.run()
    loop.assert_empty()
    loop.open("after", forced=4)  # empty again: admitted again
    loop.run()
    loop.assert_empty()
