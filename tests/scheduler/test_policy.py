"""Scheduling policy as pure functions on plain stream states: order, yielding, prefills, chunks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tts_engine.prompt import Layout
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.scheduler.policy import due_chunks, select_frame_rows, select_prefills, urgency
from tts_engine.scheduler.request import Phase, StreamState

REPO = Path(__file__).resolve().parents[2]
EOS, PAD = 151673, 151671
NOW = 1000.0
CFG = SchedulerConfig()


def stream(sid: str, *, phase: Phase = Phase.DECODING, arrival: float = 0.0, layout: Layout = Layout.NON_STREAMING,
           content: int = 5, input_ended: bool = True, frames: int = 0, first_audio_at: float | None = None,
           audio_sent_s: float = 0.0, max_frames: int = 100, forced: int | None = None,
           schedule: tuple[int, ...] = (1,)) -> StreamState:
    return StreamState(sid, layout, seed=1, max_frames=max_frames, forced_frames=forced, chunk_schedule=schedule,
                       drop_first_frame=True, arrival=arrival, phase=phase, content_ids=list(range(content)),
                       input_ended=input_ended, frames_launched=frames, frames_done=frames,
                       first_audio_at=first_audio_at, audio_sent_s=audio_sent_s)


def bucket_for(n: int) -> int:
    return next(b for b in (1, 2, 4, 8, 16, 32, 64) if b >= n)


def rows(streams, *, short=False, max_batch=64, cfg=CFG) -> list[str]:
    chosen = select_frame_rows(streams, NOW, cfg, max_batch=max_batch, bucket_for=bucket_for, short=short)
    return [s.id for s in chosen]


def test_scheduler_package_imports_no_torch():
    code = ("import sys, pkgutil, importlib, tts_engine.scheduler as p\n"
            "for m in pkgutil.iter_modules(p.__path__): importlib.import_module('tts_engine.scheduler.' + m.name)\n"
            "import tts_engine.engine.pipeline, tts_engine.engine.watchdog\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_streams_not_yet_audible_go_first():
    # a has been playing for a while and its buffer runs dry now; b has not sent any audio yet.
    a = stream("a", arrival=1.0, first_audio_at=NOW - 2.0, audio_sent_s=2.0)
    b = stream("b", arrival=5.0)
    assert rows([a, b]) == ["b", "a"]
    c = stream("c", arrival=3.0)  # among streams with no audio yet: arrival order
    assert rows([a, b, c]) == ["c", "b", "a"]
    assert rows([a, b, c], max_batch=2) == ["c", "b"]


def test_audible_streams_in_playout_deadline_order():
    # Buffered audio (sent minus heard since first audio): a 0.3 s, b 0.1 s, c 0.5 s.
    a = stream("a", arrival=1.0, first_audio_at=NOW - 1.0, audio_sent_s=1.3)
    b = stream("b", arrival=2.0, first_audio_at=NOW - 1.0, audio_sent_s=1.1)
    c = stream("c", arrival=3.0, first_audio_at=NOW - 1.0, audio_sent_s=1.5)
    assert rows([a, b, c]) == ["b", "a", "c"]
    assert b.playout_deadline(NOW) < a.playout_deadline(NOW) < c.playout_deadline(NOW)
    assert rows([a, b, c], max_batch=2) == ["b", "a"]  # more candidates than rows: the most urgent
    d = stream("d", arrival=0.5, first_audio_at=NOW - 1.0, audio_sent_s=1.3)
    assert rows([a, d]) == ["d", "a"]  # equal deadlines: arrival order


def test_playout_reports_move_the_deadline():
    a = stream("a", arrival=1.0, first_audio_at=NOW - 1.0, audio_sent_s=1.3)
    b = stream("b", arrival=2.0, first_audio_at=NOW - 1.0, audio_sent_s=1.1)
    assert rows([a, b]) == ["b", "a"]
    # b's listener started late: at NOW - 0.5 it had heard 0.2 s, so it has heard 0.7 s of 1.1 s.
    b.played_s, b.played_at = 0.2, NOW - 0.5
    assert abs(b.buffered_s(NOW) - 0.4) < 1e-9  # a has 0.3 s buffered
    assert rows([a, b]) == ["a", "b"]
    # a's listener stalled: it has heard only 0.2 s by now, so a has 1.1 s buffered and waits.
    a.played_s, a.played_at = 0.2, NOW
    assert abs(a.playout_deadline(NOW) - (NOW + 1.1)) < 1e-9
    assert rows([a, b]) == ["b", "a"]


def test_far_ahead_streams_yield_only_when_capacity_is_short_and_fill_the_bucket():
    urgent = [stream(f"u{i}", arrival=float(i), first_audio_at=NOW - 1.0, audio_sent_s=1.2) for i in range(3)]
    ahead = [stream(f"h{i}", arrival=10.0 + i, first_audio_at=NOW - 1.0, audio_sent_s=3.0 + i) for i in range(4)]
    everyone = urgent + ahead
    assert rows(everyone) == [s.id for s in everyone]  # capacity to spare: everyone runs
    # Short: the 3 urgent ones need bucket 4; one row of it would be padding, so the most urgent
    # of the far-ahead streams takes it, the others yield.
    assert rows(everyone, short=True) == ["u0", "u1", "u2", "h0"]
    # Nobody urgent: short or not, the batch runs in deadline order.
    assert rows(ahead, short=True) == ["h0", "h1", "h2", "h3"]
    # The threshold is configurable.
    lenient = SchedulerConfig(yield_buffer_s=5.0)
    assert rows(everyone, short=True, cfg=lenient) == [s.id for s in everyone]


def test_a_stream_passed_over_too_long_runs_first():
    streams = [stream(f"s{i}", arrival=float(i)) for i in range(4)]
    assert rows(streams, max_batch=2) == ["s0", "s1"]
    streams[3].skipped_steps = CFG.starvation_steps
    assert urgency(streams[3], NOW, CFG)[0] == 0
    assert rows(streams, max_batch=2) == ["s3", "s0"]
    assert rows(streams, max_batch=2, cfg=SchedulerConfig(starvation_steps=0)) == ["s0", "s1"]  # guard off


def test_prefills_are_fifo_and_bounded_by_slots_cap_and_budget():
    queued = [stream(f"q{i}", phase=Phase.QUEUED, arrival=float(10 - i)) for i in range(6)]
    fifo = [s.id for s in sorted(queued, key=lambda s: s.arrival)]

    def pick(free_slots=8, budget=float("inf"), cost=0.002):
        return [s.id for s in select_prefills(queued, free_slots, CFG, cost_of=lambda s: cost, budget_s=budget)]

    assert pick() == fifo[: CFG.max_prefills_per_step]
    assert pick(free_slots=2) == fifo[:2]
    assert pick(free_slots=0) == []
    # The budget (the most urgent audible stream's slack) limits the extra prefills, never the first.
    assert pick(budget=0.005) == fifo[:2]
    assert pick(budget=-1.0) == fifo[:1]


def test_due_chunks_follow_the_schedule_over_launched_frames():
    s = stream("s", schedule=(1, 2, 4), frames=1)  # frame 0 is dropped: nothing audible yet
    assert due_chunks(s) == []
    s.frames_launched = 2
    assert due_chunks(s) == [(1, 1)]
    s.frames_chunked, s.chunks_planned, s.frames_launched = 1, 1, 3
    assert due_chunks(s) == []  # 1 of 2 frames
    s.frames_launched = 9
    assert due_chunks(s) == [(2, 2), (4, 4)]  # then 2 of 4 frames wait
    s.frames_chunked, s.chunks_planned = 7, 3
    assert due_chunks(s) == []
    # End of stream (the limit is launched) or a flush sends what there is.
    s.flush_targets.append(9)
    assert due_chunks(s) == [(8, 1)]
    s.flush_targets.clear()
    s.max_frames = 9
    assert due_chunks(s) == [(8, 1)]
    # Past an EOS nothing is chunked.
    s.max_frames, s.frames_launched, s.eos_frame = 100, 12, 9
    assert due_chunks(s) == [(8, 1)]


def test_with_the_codec_tick_chunks_after_the_first_wait_for_a_tick():
    s = stream("s", schedule=(1, 2, 4), frames=2)
    assert due_chunks(s, on_tick=False) == [(1, 1)]  # the first chunk does not wait
    s.frames_chunked, s.chunks_planned, s.frames_launched = 1, 1, 4
    assert due_chunks(s, on_tick=False) == []  # 2 frames ready, no tick
    assert due_chunks(s, on_tick=True) == [(2, 2)]  # every ready frame, not the schedule's 2 then 4
    assert due_chunks(s, on_tick=False, urgent=True) == [(2, 2)]  # its listener is about to run dry
    assert due_chunks(s, on_tick=False, free_chunks=2) == [(2, 2)]  # the second chunk free of the tick too
    s.frames_launched = 3
    assert due_chunks(s, on_tick=False, free_chunks=2) == []  # ... as its schedule says: 2 frames
    s.frames_launched = 12  # 10 ready: pieces of at most the schedule's largest entry
    assert due_chunks(s, on_tick=True) == [(2, 4), (6, 4), (10, 2)]
    s.max_frames = 12  # end of stream: no tick needed
    assert due_chunks(s, on_tick=False) == [(2, 4), (6, 4), (10, 2)]


@pytest.mark.parametrize("free_chunks, steps", [(1, 3), (2, 2)])
def test_the_second_chunk_comes_a_step_sooner_free_of_the_tick(free_chunks, steps):
    """Under arrivals (a tick step holding a prefill moves to the next step), a second chunk held for a
    tick reaches its listener up to three engine steps after the first; free of the tick, two. At ~19 ms
    a step (128 streams) three steps are ~57 ms of the first chunk's 80 ms: a slower step runs it dry."""
    from tests.scheduler.fake_runner import FakeLoop

    loop = FakeLoop(SchedulerConfig(codec_tick_steps=2, codec_tick_free_chunks=free_chunks), depth=2)
    arrivals: dict[str, list[int]] = {}
    for step in range(60):
        if step % 3 == 0 and step < 30:
            loop.open(f"s{step}", forced=40, schedule=(1, 2, 4, 8, 12))
        heard = {sid: len(lis.audio) for sid, lis in loop.listeners.items()}
        loop.step()
        for sid, lis in loop.listeners.items():
            arrivals.setdefault(sid, []).extend([step] * (len(lis.audio) - heard[sid]))
    loop.run()
    assert all(lis.frames == 39 and lis.done for lis in loop.listeners.values())
    assert max(a[1] - a[0] for a in arrivals.values()) == steps, arrivals


def test_the_codec_tick_merges_streams_into_one_codec_call():
    """Streams that started at different steps get chunks of one length at a tick: one codec call
    per tick, where their own schedules give each phase its own call."""
    from tests.scheduler.fake_runner import FakeLoop

    def codec_calls(tick: int, free_chunks: int = 1) -> tuple[int, int]:
        loop = FakeLoop(SchedulerConfig(codec_tick_steps=tick, codec_tick_free_chunks=free_chunks), depth=1)
        for i in range(6):
            loop.open(f"s{i}", forced=40, schedule=(1, 2, 4, 8))
            loop.step()
        loop.run()
        assert all(lis.frames == 39 and lis.done for lis in loop.listeners.values())
        plans = loop.runner.plans
        return sum(len(p.chunks) for p in plans), sum(len(b.chunks) for p in plans for b in p.chunks)

    calls_off, chunks_off = codec_calls(0)
    calls_on, chunks_on = codec_calls(3)
    assert calls_on < calls_off * 0.7, (calls_on, calls_off)
    assert chunks_on / calls_on > 2 * chunks_off / calls_off  # streams per call
    calls_two_free, _ = codec_calls(3, free_chunks=2)  # each stream's second chunk a call of its own phase
    assert calls_on < calls_two_free < calls_off, (calls_on, calls_two_free, calls_off)


def test_streaming_text_gates_frames():
    s = stream("s", layout=Layout.STREAMING, content=3, input_ended=False, frames=2)
    assert s.step_text(1, EOS, PAD) == 2 and s.step_text(2, EOS, PAD) is None  # frame k needs token k + 2
    s.input_ended = True
    assert s.step_text(2, EOS, PAD) == EOS and s.step_text(3, EOS, PAD) == PAD
    assert stream("n").step_text(7, EOS, PAD) == PAD  # non-streaming: always pad


def test_a_tick_step_with_a_prefill_moves_the_tick_to_the_next_step():
    """codec_tick_yields_to_prefill: the new stream's next frame waits for the prefill step's talker
    half, which that step's tick calls would precede; one step later its first chunk goes ahead of
    them. A tick moves at most one step, and an off-tick step is left alone."""
    from tests.scheduler.fake_runner import FakeLoop

    def tick_chunks(plan) -> int:  # chunks of the streams already audible ("a")
        return sum(1 for b in plan.chunks for c in b.chunks if c.stream_id == "a")

    def run(yields: bool, opens_on_tick: bool) -> tuple[list, FakeLoop]:
        loop = FakeLoop(SchedulerConfig(codec_tick_steps=2, codec_tick_yields_to_prefill=yields), depth=1)
        loop.open("a", forced=60, schedule=(1, 2))
        for _ in range(8):
            loop.step()
        if ((loop.sched._next_step + 1) % 2 == 0) != opens_on_tick:
            loop.step()  # so that the next plan is (not) a tick step
        loop.open("b", forced=60, schedule=(1, 2))
        plans = [loop.step() for _ in range(4)]
        assert plans[0].prefills and plans[0].prefills[0].stream_id == "b"
        return plans, loop

    plans, loop = run(yields=False, opens_on_tick=True)
    assert [tick_chunks(p) > 0 for p in plans] == [True, False, True, False]
    plans, loop = run(yields=True, opens_on_tick=True)
    assert [tick_chunks(p) > 0 for p in plans] == [False, True, False, True]
    assert loop.sched.stats["ticks_postponed"] == 1
    plans, loop = run(yields=True, opens_on_tick=False)  # its prefill is not on a tick: nothing moves
    assert [tick_chunks(p) > 0 for p in plans] == [False, True, False, True]
    assert loop.sched.stats["ticks_postponed"] == 0
    loop.run()
    assert all(lis.done for lis in loop.listeners.values())


def test_a_tick_is_not_postponed_twice_in_a_row():
    from tests.scheduler.fake_runner import FakeLoop

    loop = FakeLoop(SchedulerConfig(codec_tick_steps=2, codec_tick_yields_to_prefill=True), depth=1)
    loop.open("a", forced=60, schedule=(1, 2))
    for _ in range(8):
        loop.step()
    if (loop.sched._next_step + 1) % 2 != 0:
        loop.step()  # the next plan is a tick step
    for i in range(3):  # a new stream on each of the next steps: every one of them prefills
        loop.open(f"n{i}", forced=20, schedule=(1, 2))
        plan = loop.step()
        assert plan.prefills
        a_chunks = sum(1 for b in plan.chunks for c in b.chunks if c.stream_id == "a")
        assert (a_chunks > 0) == (i == 1), i  # postponed once, then held although a prefill is there
    assert loop.sched.stats["ticks_postponed"] == 1
    loop.run()
    assert all(lis.done for lis in loop.listeners.values())
