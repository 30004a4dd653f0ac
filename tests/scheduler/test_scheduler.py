"""The Scheduler driven by a fake runner through the engine's step pipeline (pure Python): first
audio, deadline order without starvation, pipelined EOS, flushes, and abort in every state."""

from __future__ import annotations

import itertools

import pytest

from tests.scheduler.fake_runner import FakeLoop, FakeRunner
from tts_engine.prompt import Layout
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.scheduler.request import Phase


def frames_of(loop: FakeLoop, sid: str) -> list[tuple[int, int]]:
    """(frame, step) of every frame row the runner ran for `sid`."""
    return [(r.frame, p.step_id) for p in loop.runner.plans if p.frames for r in p.frames.rows if r.stream_id == sid]


def first_audio_step(loop: FakeLoop, sid: str) -> int | None:
    for p in loop.runner.plans:
        if any(c.stream_id == sid for b in p.chunks for c in b.chunks):
            return p.step_id
    return None


@pytest.mark.parametrize("depth", [1, 2])
def test_prefill_first_frame_and_first_chunk_come_as_early_as_possible(depth):
    loop = FakeLoop(depth=depth)
    loop.open("a", forced=10)
    p0 = loop.step()
    # Step 0: the prefill and frame 0 (dropped: a built-in voice) in one plan: the GPU runs them in order.
    assert [x.stream_id for x in p0.prefills] == ["a"] and [r.frame for r in p0.frames.rows] == [0]
    p1 = loop.step()
    # Step 1: frame 1 and, behind it in the same plan, its one-frame chunk (before its EOS check).
    assert [r.frame for r in p1.frames.rows] == [1]
    assert [(c.first_frame, c.num_frames) for b in p1.chunks for c in b.chunks] == [(1, 1)]
    loop.step()
    # Step 1's audio is read once step 2 is launched (depth 2) or at once (depth 1).
    assert loop.listeners["a"].frames == 1
    loop.run()
    assert loop.listeners["a"].done == "eos" and loop.listeners["a"].frames == 9


def test_streams_not_yet_audible_get_the_rows_when_rows_are_short():
    # Two rows per step (largest bucket 2); a and b play, c arrives later and is not yet audible.
    loop = FakeLoop(SchedulerConfig(max_active_streams=4), buckets=(1, 2))
    loop.open("a", forced=200)
    loop.open("b", forced=200)
    for _ in range(5):
        loop.step()
    assert loop.listeners["a"].frames and loop.listeners["b"].frames
    loop.open("c", forced=200)
    start = loop.sched._next_step
    for _ in range(4):
        loop.step()
    c_steps = [step for _, step in frames_of(loop, "c")]
    assert c_steps[:2] == [start, start + 1]  # frames 0 and 1 at once, ahead of playing streams
    assert first_audio_step(loop, "c") == start + 1
    for sid in "abc":
        loop.abort(sid)
    loop.run()
    loop.assert_empty()


def test_deadline_order_without_starvation():
    """Six playing streams, two rows per step: the one nearest its playout deadline runs, and
    nobody waits long, because each skipped stream's buffer drains until it is the most urgent."""
    cfg = SchedulerConfig(max_active_streams=6, starvation_steps=0)  # deadlines alone, no guard
    loop = FakeLoop(cfg, buckets=(1, 2), dt=0.04)
    for i in range(6):
        loop.open(f"s{i}", forced=60, schedule=(1,))
    steps = 0
    while loop.sched.streams and steps < 2000:
        plan = loop.sched.schedule(loop.now)
        if plan.frames:
            # Every row is at least as urgent as every candidate left out.
            run = {r.stream_id for r in plan.frames.rows}
            ran = [loop.sched.streams[s].playout_deadline(loop.now) for s in run
                   if loop.sched.streams[s].audible]
            left = [s.playout_deadline(loop.now) for s in loop.sched.streams.values()
                    if s.id not in run and s.audible and loop.sched._frame_ready(s)]
            if ran and left:
                assert max(ran) <= min(left) + 1e-9
        loop.pipeline.push(loop.runner.launch(plan))
        for launched in loop.pipeline.completed(must_wait=True):
            loop._act(loop.sched.postprocess(launched.result))
        loop.now += loop.dt
        steps += 1
        loop.assert_invariants()
    loop.run()
    for i in range(6):
        ran = [step for _, step in frames_of(loop, f"s{i}")]
        assert len(ran) == 60 and loop.listeners[f"s{i}"].done == "eos"
        gaps = [b - a for a, b in itertools.pairwise(ran)]
        assert max(gaps) <= 6, f"s{i} waited {max(gaps)} steps"  # 6 streams share 2 rows: 3 steps a round
    loop.assert_empty()


def test_starvation_guard_runs_a_stream_passed_over_too_often():
    # One row per step; a is not yet audible forever (its audio is all trimmed silence, say), so
    # by order it always goes first; b is audible. The guard still runs b every few steps.
    cfg = SchedulerConfig(max_active_streams=2, starvation_steps=3)
    loop = FakeLoop(cfg, buckets=(1,))
    loop.open("b", forced=100)
    for _ in range(6):
        loop.step()
    loop.open("a", forced=100, schedule=(64,))  # no chunk for a long while: not audible
    for _ in range(40):
        loop.step()
    b_steps = [step for _, step in frames_of(loop, "b")]
    gaps = [y - x for x, y in itertools.pairwise(b_steps)]
    assert max(gaps) <= 4 and loop.sched.stats["starved_runs"] > 0
    loop.abort("a")
    loop.abort("b")
    loop.run()
    loop.assert_empty()


@pytest.mark.parametrize("depth", [1, 2])
def test_eos_read_late_wastes_one_frame_and_cuts_the_chunk_exactly(depth):
    runner = FakeRunner(eos_at={"a": 6, "b": 1, "c": 0, "d": 3})
    loop = FakeLoop(depth=depth, runner=runner)
    for sid in "abcd":
        loop.open(sid, forced=None, max_frames=50, schedule=(1, 4))
    loop.run()
    got = {sid: loop.listeners[sid] for sid in "abcd"}
    # Audible frames: 1 .. EOS - 1 (frame 0 dropped); nothing of the EOS frame or after it.
    assert {sid: g.frames for sid, g in got.items()} == {"a": 5, "b": 0, "c": 0, "d": 2}
    assert all(g.done == "eos" for g in got.values())
    # a's EOS came after its last full chunk was out: that chunk could not know it was the last.
    assert [a.num_frames for a in got["a"].audio] == [1, 4] and not got["a"].audio[-1].final
    assert [a.num_frames for a in got["d"].audio] == [1, 1] and got["d"].audio[-1].final
    # With depth 2 the frame after an EOS was already launched when the EOS was read.
    assert loop.sched.stats["frames_wasted"] == (0 if depth == 1 else 4)
    loop.assert_empty()


def test_flush_completes_when_its_audio_is_out_and_at_once_when_nothing_is_pending():
    loop = FakeLoop()
    loop.open("s", layout=Layout.STREAMING, tokens=4, ended=False, forced=None, schedule=(8,))
    loop.flush("s")  # 4 tokens: frames 0..2 exist once 3 are launched; chunk (frames 1, 2) then
    for _ in range(8):
        loop.step()
    listener = loop.listeners["s"]
    assert listener.flushes == 1 and listener.frames == 2
    s = loop.sched.streams["s"]
    assert s.frames_launched == 3  # frame 3 needs token 5
    loop.flush("s")  # no new text: done without any work
    loop.step()
    assert listener.flushes == 2
    loop.append("s", 3)
    loop.end("s")
    loop.run()
    assert listener.done == "length" or listener.done == "eos"
    loop.assert_empty()


def test_streaming_text_gates_frames_until_it_arrives():
    loop = FakeLoop()
    s = loop.open("s", layout=Layout.STREAMING, tokens=0, ended=False, forced=None)
    for _ in range(3):
        loop.step()
    assert s.phase is Phase.WAITING_TEXT and not loop.runner.plans
    loop.append("s", 3)
    for _ in range(6):
        loop.step()
    assert s.frames_launched == 2 and s.frames_done == 2  # frame k needs token k + 2
    loop.end("s")
    loop.run()
    assert loop.listeners["s"].done in ("eos", "length")
    loop.assert_empty()


# -- abort in every state -------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["waiting_text", "queued", "prefill_in_flight", "decoding", "mid_chunk",
                                   "frame_in_flight", "ending", "finished", "unknown"])
@pytest.mark.parametrize("depth", [1, 2])
def test_abort_in_every_state_frees_everything_and_neighbours_go_on(where, depth):
    loop = FakeLoop(SchedulerConfig(max_active_streams=2, max_queued_streams=2), depth=depth)
    loop.open("n", forced=30)  # a neighbour that must be unaffected
    loop.step()
    if where == "waiting_text":
        loop.open("x", layout=Layout.STREAMING, tokens=0, ended=False, forced=None)
        assert loop.sched.streams["x"].phase is Phase.WAITING_TEXT
    elif where == "queued":
        loop.open("hog", forced=30)
        loop.open("x", forced=30)
        loop.step()
        assert loop.sched.streams["x"].phase is Phase.QUEUED  # both slots taken
    elif where == "prefill_in_flight":
        loop.open("x", forced=30)
        plan = loop.sched.schedule(loop.now)  # planned and launched, not yet read
        loop.pipeline.push(loop.runner.launch(plan))
        assert any(p.stream_id == "x" for p in plan.prefills)
    elif where in ("decoding", "mid_chunk", "frame_in_flight", "ending"):
        loop.open("x", forced=8 if where == "ending" else 30, schedule=(1, 2, 4))
        target = {"decoding": 3, "mid_chunk": 3, "frame_in_flight": 4, "ending": 7}[where]
        while loop.sched.streams["x"].frames_launched < target:
            loop.step()
        if where in ("mid_chunk", "ending"):  # a chunk of x is planned and launched, its audio not read
            plan = loop.sched.schedule(loop.now)
            loop.pipeline.push(loop.runner.launch(plan))
            assert any(c.stream_id == "x" for b in plan.chunks for c in b.chunks), plan
            assert loop.sched.streams["x"].launches_over is (where == "ending")
        if where == "frame_in_flight":
            assert loop.sched.in_flight or depth == 1
    elif where == "finished":
        loop.open("x", forced=3)
        while "x" in loop.sched.streams:
            loop.step()
        assert loop.listeners["x"].done == "eos"
    audio_before = loop.listeners["x"].frames if "x" in loop.listeners else 0
    expect = where not in ("finished", "unknown")
    assert loop.abort("x") is expect
    assert loop.abort("x") is False  # twice: nothing more
    if expect:
        assert "x" not in loop.sched.streams and loop.listeners["x"].done == "cancelled"
        # Its slot is free for the next plan, even with its work still in flight.
        assert loop.sched.slots.num_free >= 1 or "hog" in loop.sched.streams
    loop.open("y", forced=5)  # may take x's slot at once
    loop.run()
    if "x" in loop.listeners:
        assert loop.listeners["x"].frames == audio_before  # no audio after the abort
    assert loop.listeners["n"].done == "eos" and loop.listeners["n"].frames == 29
    assert loop.listeners["y"].done == "eos" and loop.listeners["y"].frames == 4
    loop.assert_empty()


def test_a_final_chunk_rides_padded_in_a_longer_call_when_the_cost_model_says_so():
    loop = FakeLoop()
    loop.open("b", forced=100, schedule=(4,))  # 4-frame chunks due at steps 4, 8, ...
    loop.step()
    loop.open("a", forced=4, schedule=(12,))  # its only chunk: 3 audible frames, due at step 4
    for _ in range(3):
        loop.step()
    plan = loop.step()
    assert [(b.num_frames, [(c.stream_id, c.num_frames) for c in b.chunks]) for b in plan.chunks] == \
        [(4, [("b", 4), ("a", 3)])]
    assert loop.runner.padded and loop.sched.stats["padded_chunks"] == 1
    loop.abort("b")
    loop.run()
    assert loop.listeners["a"].done == "eos" and loop.listeners["a"].frames == 3
    assert loop.listeners["a"].audio[-1].final
    # Without a fixed cost per call, one longer call is never cheaper: no padding.
    loop = FakeLoop()
    loop.sched.cost.chunk_s = lambda num_frames, batch: 1e-3 * num_frames * batch
    loop.open("b", forced=100, schedule=(4,))
    loop.step()
    loop.open("a", forced=4, schedule=(12,))
    for _ in range(4):
        plan = loop.step()
    assert sorted(b.num_frames for b in plan.chunks) == [3, 4] and not loop.runner.padded
    loop.abort("b")
    loop.run()
    loop.assert_empty()


def test_lookahead_only_while_a_stream_needs_audio_soon():
    # 10 ms per step, 80 ms of audio per frame: a playing stream pulls ahead of its listener.
    cfg = SchedulerConfig(lookahead_buffer_s=0.3)
    loop = FakeLoop(cfg)
    assert not loop.sched.wants_lookahead(loop.now)  # nothing to do
    loop.open("a", forced=400)
    assert loop.sched.wants_lookahead(loop.now)  # queued for a slot
    loop.step()
    assert loop.sched.wants_lookahead(loop.now)  # decoding, not yet audible
    steps = 0
    while loop.sched.streams["a"].buffered_s(loop.now) <= 0.3:
        assert loop.sched.wants_lookahead(loop.now)
        loop.step()
        steps += 1
    assert 0 < steps < 20 and not loop.sched.wants_lookahead(loop.now)
    assert len(loop.pipeline) <= 1  # the loop ran one step at a time once a was ahead
    loop.open("b", forced=400)
    assert loop.sched.wants_lookahead(loop.now)  # a newcomer: its first frames go back to back
    while not loop.sched.streams["b"].audible or loop.sched.streams["b"].buffered_s(loop.now) <= 0.3:
        loop.step()
    assert not loop.sched.wants_lookahead(loop.now)
    # The transport reports that a's listener has heard all but 0.1 s of it: a needs audio soon.
    loop.report_playout("a", loop.sched.streams["a"].audio_sent_s - 0.1)
    assert loop.sched.wants_lookahead(loop.now)
    with pytest.raises(ValueError, match="lookahead_buffer_s must be a number >= 0, got None"):
        SchedulerConfig(lookahead_buffer_s=None).validate()
    loop.run()
