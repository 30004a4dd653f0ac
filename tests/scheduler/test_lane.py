"""The newcomer lane (SchedulerConfig.newcomer_lane) on the fake loop: which streams enter it, what its
steps hold, that main steps leave a lane stream alone until its lane steps are read, cancel in the
lane, and lane steps completing before main steps launched earlier (FakeLoop)."""

from __future__ import annotations

import pytest

from tests.scheduler.fake_runner import FakeLoop
from tts_engine.prompt import Layout
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.scheduler.plan import StepResult


def lane_loop(**cfg) -> FakeLoop:
    return FakeLoop(SchedulerConfig(newcomer_lane=True, codec_tick_steps=2, **cfg), depth=2)


def busy_loop(**cfg) -> FakeLoop:
    """A lane loop with one stream ("a") decoding and audible."""
    loop = lane_loop(**cfg)
    loop.open("a", forced=80, schedule=(1, 2))
    for _ in range(6):
        loop.step()
    assert loop.listeners["a"].frames > 0 and loop.sched.stats["lane_streams"] == 0  # alone: the usual way
    return loop


def test_a_newcomer_beside_a_decoding_stream_runs_its_first_steps_in_the_lane():
    loop = busy_loop()
    loop.open("b", forced=30, schedule=(1, 2, 4))
    lane_plans, main_plans = [], []
    for _ in range(6):
        before = len(loop.runner.plans)
        loop.step()
        for plan in loop.runner.plans[before:]:
            (lane_plans if plan.lane else main_plans).append(plan)
    # Prefill + frame 0, then frame 1 + its one-frame first chunk, each at batch 1.
    assert [(len(p.prefills), [r.frame for r in p.frames.rows]) for p in lane_plans] == [(1, [0]), (0, [1])]
    assert [(c.first_frame, c.num_frames) for b in lane_plans[1].chunks for c in b.chunks] == [(1, 1)]
    assert all(p.frames.bucket == 1 and p.stream_ids == {"b"} for p in lane_plans)
    # Main steps kept "a" going; "b" joined them only after its lane steps were read (the loop asserts
    # that no main step touched it while they were in flight), from frame 2 on.
    b_main = [r.frame for p in main_plans if p.frames for r in p.frames.rows if r.stream_id == "b"]
    assert b_main and b_main[0] == 2
    assert any(r.stream_id == "a" for p in main_plans if p.frames for r in p.frames.rows)
    loop.run()
    assert loop.listeners["b"].done == "eos" and loop.listeners["b"].frames == 29
    assert loop.listeners["a"].done == "eos"
    assert loop.sched.stats["lane_streams"] == 1 and loop.sched.stats["lane_steps"] == 2
    loop.assert_empty()


def test_lane_steps_do_not_move_the_codec_tick():
    """The tick counts main steps: with a newcomer's two lane steps in between, stream "a"'s tick chunks
    come in the same main steps as without it (tick 3, so that two extra step ids would show)."""

    def tick_pattern(with_newcomer: bool) -> list[bool]:
        loop = lane_loop()
        loop.sched.cfg = SchedulerConfig(newcomer_lane=True, codec_tick_steps=3, codec_tick_yields_to_prefill=False)
        loop.open("a", forced=80, schedule=(1, 2))
        for _ in range(6):
            loop.step()
        if with_newcomer:
            loop.open("b", forced=80, schedule=(1, 2))
        pattern = []
        for _ in range(12):
            plan = loop.step()
            pattern.append(any(c.stream_id == "a" for b in plan.chunks for c in b.chunks))
        assert loop.sched.stats["lane_steps"] == (2 if with_newcomer else 0)
        return pattern

    assert tick_pattern(True) == tick_pattern(False)
    assert any(tick_pattern(False)) and not all(tick_pattern(False))


def test_who_takes_the_usual_way():
    # The lane is off by default.
    loop = FakeLoop(SchedulerConfig(codec_tick_steps=2), depth=2)
    loop.open("a", forced=40)
    loop.step()
    loop.open("b", forced=40)
    loop.run()
    assert not any(p.lane for p in loop.runner.plans) and loop.listeners["b"].done == "eos"
    # A first chunk longer than newcomer_lane_max_first_chunk.
    loop = busy_loop()
    loop.open("b", forced=40, schedule=(4, 8))
    loop.run()
    assert loop.sched.stats["lane_streams"] == 0 and loop.listeners["b"].done == "eos"
    # A second newcomer while the first one's lane steps are in flight.
    loop = busy_loop()
    loop.open("b", forced=40)
    loop.open("c", forced=40)
    loop.step()
    assert loop.sched.streams["b"].in_lane and not loop.sched.streams["c"].in_lane
    loop.run()
    assert loop.sched.stats["lane_streams"] == 1
    assert {sid: lis.done for sid, lis in loop.listeners.items()} == {"a": "eos", "b": "eos", "c": "eos"}


def test_a_streaming_newcomer_takes_the_lane_only_with_the_text_of_its_first_chunk():
    """Frames 0 and 1 need text tokens up to the third: with fewer a streaming newcomer would hold the
    lane while its client pauses, so it takes the usual way."""
    loop = busy_loop()
    loop.open("b", tokens=2, ended=False, layout=Layout.STREAMING, forced=None, max_frames=20)
    loop.step()
    assert not loop.sched.streams["b"].in_lane and loop.sched.stats["lane_streams"] == 0
    loop.open("c", tokens=3, ended=False, layout=Layout.STREAMING, forced=None, max_frames=20)
    for _ in range(3):
        loop.step()
    assert loop.sched.stats["lane_streams"] == 1 and loop.sched.stats["lane_steps"] == 2
    for sid in ("b", "c"):
        loop.append(sid, 3)
        loop.end(sid)
    loop.run()
    assert loop.listeners["b"].done and loop.listeners["c"].done
    loop.assert_empty()


@pytest.mark.parametrize("after_steps", [0, 1, 2])
def test_cancel_in_the_lane(after_steps):
    """Cancelled with lane steps in flight or between them: its slot and the lane are freed, the
    results of its lane steps are dropped, and the next newcomer can use the lane."""
    loop = busy_loop()
    loop.open("b", forced=30)
    for _ in range(after_steps):
        loop.step()
    assert loop.abort("b")
    assert loop.sched._lane is None
    loop.open("c", forced=20)
    loop.run()
    assert loop.listeners["b"].done == "cancelled" and loop.listeners["c"].done == "eos"
    assert loop.sched.stats["lane_streams"] == (2 if after_steps else 1)
    loop.assert_empty()


def test_each_lane_completes_in_order_but_lanes_may_pass_each_other():
    from tests.scheduler.fake_runner import BUCKETS, EOS, PAD, PROMPT_LEN
    from tts_engine.scheduler.request import StreamState
    from tts_engine.scheduler.scheduler import Scheduler

    sched = Scheduler(SchedulerConfig(newcomer_lane=True), BUCKETS, EOS, PAD)

    def arrive(sid):
        sched.add(StreamState(sid, Layout.NON_STREAMING, seed=1, max_frames=40, forced_frames=40,
                              chunk_schedule=(1, 2), drop_first_frame=True, arrival=len(sched.streams)))
        sched.streams[sid].content_ids.extend(range(5))
        sched.streams[sid].input_ended = True
        sched.enqueue(sid, PROMPT_LEN)

    def done(plan):
        return sched.postprocess(StepResult(plan.step_id, (False,) * len(plan.frames.rows) if plan.frames else ()))

    arrive("a")
    done(sched.schedule(0.0))
    m1 = sched.schedule(0.0)  # in flight
    arrive("b")
    lane = sched.schedule_lane(0.0)
    assert lane.lane and lane.step_id > m1.step_id and lane.prefills[0].stream_id == "b"
    done(lane)  # before m1, launched earlier on the other lane
    m2 = sched.schedule(0.0)
    assert "b" not in m2.stream_ids  # its lane steps are not all planned yet (the first chunk)
    with pytest.raises(RuntimeError, match=f"step {m2.step_id} completed before step {m1.step_id}"):
        done(m2)
    done(m1)
    done(m2)
    assert sched.violations(idle=False) == []


@pytest.mark.parametrize("frames", [0, 4])
def test_the_lanes_first_chunk_limit_is_checked(frames):
    """Its lane steps are launched back to back: more than the runner's pinned ring of 4 would
    overwrite the first step's codes before they are read."""
    with pytest.raises(ValueError, match=r"newcomer_lane_max_first_chunk must be in 1\.\.3, got"):
        SchedulerConfig(newcomer_lane=True, newcomer_lane_max_first_chunk=frames).validate()


def test_an_unknown_step_is_an_error():
    loop = busy_loop()
    with pytest.raises(RuntimeError, match="step 999 completed but is not in flight"):
        loop.sched.postprocess(StepResult(999))
