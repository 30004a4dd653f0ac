"""Scheduling policy on plain Python: which streams prefill and which produce a frame next."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tts_engine.prompt import Layout
from tts_engine.scheduler.policy import plan_step
from tts_engine.scheduler.request import Phase, StreamState

REPO = Path(__file__).resolve().parents[2]
EOS, PAD = 151673, 151671
NOW = 1000.0


def stream(sid: str, *, phase: Phase = Phase.DECODING, arrival: float = 0.0, layout: Layout = Layout.NON_STREAMING,
           content: int = 5, input_ended: bool = True, frames_done: int = 0, first_audio_at: float | None = None,
           audio_sent_s: float = 0.0, max_frames: int = 100, forced: int | None = None) -> StreamState:
    return StreamState(sid, layout, seed=1, max_frames=max_frames, forced_frames=forced, chunk_schedule=(1,),
                       drop_first_frame=True, arrival=arrival, phase=phase, content_ids=list(range(content)),
                       input_ended=input_ended, frames_done=frames_done, first_audio_at=first_audio_at,
                       audio_sent_s=audio_sent_s)


def plan(streams, free_slots=8, max_batch=64, max_prefills=4, now=NOW):
    return plan_step(streams, free_slots, max_batch, max_prefills, now, EOS, PAD)


def test_scheduler_imports_no_torch():
    code = ("import sys; import tts_engine.scheduler, tts_engine.scheduler.policy, tts_engine.scheduler.request; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_streams_not_yet_audible_go_first():
    # a has been playing for a while and its buffer runs dry now; b has not sent any audio yet.
    a = stream("a", arrival=1.0, first_audio_at=NOW - 2.0, audio_sent_s=2.0)
    b = stream("b", arrival=5.0)
    assert plan([a, b]).decode == ["b", "a"]
    # Among streams with no audio yet: arrival order.
    c = stream("c", arrival=3.0)
    assert plan([a, b, c]).decode == ["c", "b", "a"]


def test_audible_streams_in_playout_deadline_order():
    # Buffered audio (sent minus heard since first audio): a 0.3 s, b 0.1 s, c 0.5 s.
    a = stream("a", arrival=1.0, first_audio_at=NOW - 1.0, audio_sent_s=1.3)
    b = stream("b", arrival=2.0, first_audio_at=NOW - 1.0, audio_sent_s=1.1)
    c = stream("c", arrival=3.0, first_audio_at=NOW - 1.0, audio_sent_s=1.5)
    assert plan([a, b, c]).decode == ["b", "a", "c"]
    assert b.playout_deadline(NOW) < a.playout_deadline(NOW) < c.playout_deadline(NOW)
    # A batch cap keeps the most urgent.
    assert plan([a, b, c], max_batch=2).decode == ["b", "a"]
    # Equal deadlines: arrival order.
    d = stream("d", arrival=0.5, first_audio_at=NOW - 1.0, audio_sent_s=1.3)
    assert plan([a, d]).decode == ["d", "a"]


def test_playout_reports_move_the_deadline():
    a = stream("a", arrival=1.0, first_audio_at=NOW - 1.0, audio_sent_s=1.3)
    b = stream("b", arrival=2.0, first_audio_at=NOW - 1.0, audio_sent_s=1.1)
    assert plan([a, b]).decode == ["b", "a"]
    # b's listener started late: at NOW - 0.5 it had heard 0.2 s, so it has heard 0.7 s of 1.1 s.
    b.played_s, b.played_at = 0.2, NOW - 0.5
    assert abs(b.buffered_s(NOW) - 0.4) < 1e-9  # a has 0.3 s buffered
    assert plan([a, b]).decode == ["a", "b"]
    # a's listener stalled: it has heard only 0.2 s by now, so a has 1.1 s buffered and waits.
    a.played_s, a.played_at = 0.2, NOW
    assert abs(a.playout_deadline(NOW) - (NOW + 1.1)) < 1e-9
    assert plan([a, b]).decode == ["b", "a"]


def test_prefill_is_fifo_and_bounded_by_free_slots_and_the_per_step_cap():
    queued = [stream(f"q{i}", phase=Phase.QUEUED, arrival=float(10 - i)) for i in range(6)]
    fifo = [s.id for s in sorted(queued, key=lambda s: s.arrival)]
    assert plan(queued, free_slots=8, max_prefills=4).prefill == fifo[:4]
    assert plan(queued, free_slots=2, max_prefills=4).prefill == fifo[:2]
    assert plan(queued, free_slots=0).prefill == []
    assert plan(queued, free_slots=0).empty
    queued[5].cancelled = True  # the oldest is cancelled: the next ones move up
    assert plan(queued, free_slots=2).prefill == fifo[1:3]


def test_streams_waiting_for_text_are_not_scheduled():
    waiting = stream("w", phase=Phase.WAITING_TEXT, layout=Layout.STREAMING, content=0, input_ended=False)
    # Streaming layout: frame k needs text token k + 2. Three tokens so far: frames 0 and 1 only.
    s = stream("s", layout=Layout.STREAMING, content=3, input_ended=False, frames_done=2)
    ready = stream("r", layout=Layout.STREAMING, content=3, input_ended=False, frames_done=1)
    p = plan([waiting, s, ready])
    assert p.prefill == [] and p.decode == ["r"]
    # End of input: the next step carries tts_eos, later ones tts_pad.
    s.input_ended = True
    assert s.step_text(2, EOS, PAD) == EOS and s.step_text(3, EOS, PAD) == PAD
    assert set(plan([waiting, s, ready]).decode) == {"s", "r"}


def test_finished_cancelled_and_done_streams_are_not_scheduled():
    done = stream("done", frames_done=10, max_frames=10)
    forced = stream("forced", frames_done=7, forced=7)
    capped = stream("capped", frames_done=5, forced=50, max_frames=5)  # max_frames caps a forced length
    cancelled = stream("cancelled")
    cancelled.cancelled = True
    finished = stream("finished", phase=Phase.FINISHED)
    live = stream("live", frames_done=3, forced=7)
    assert plan([done, forced, capped, cancelled, finished, live]).decode == ["live"]
    assert capped.frame_limit == 5 and forced.frame_limit == 7 and done.frame_limit == 10
