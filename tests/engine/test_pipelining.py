"""The real engine with pipeline depth 2 (as on CUDA) on the tiny checkpoint: step k+1 is launched
before step k is read, and everything still equals the synchronous engine and the reference:
audio, EOS read one step late, cancel within one step, slot reuse."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch

from tests.engine.helpers import (
    LONG,
    SHORT,
    VOICE,
    assert_pcm_close,
    collect,
    next_event,
    options,
    pcm_of,
    reference_pcm,
    start_engine,
    wait_until,
)
from tts_engine.engine.api import AudioEvent, DoneEvent
from tts_engine.engine.audio import to_s16le
from tts_engine.engine.core import HOST_PARTS
from tts_engine.engine.entry import ISSUE_PARTS, TTFA_PARTS
from tts_engine.prompt import Layout
from tts_engine.reference import generate_codes
from tts_engine.sampling import SamplingParams


@pytest.fixture
def launches(pipelined_engine):
    """Steps still unread at each launch: > 0 shows a step launched while the previous one was in flight."""
    seen: list[int] = []
    launch = pipelined_engine.executor.launch

    def spy(plan, entries):
        seen.append(len(pipelined_engine.pipeline))
        return launch(plan, entries)

    pipelined_engine.executor.launch = spy
    yield seen
    pipelined_engine.executor.launch = launch


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_pipelined_audio_equals_the_reference(pipelined_engine, synth, launches, layout):
    texts = [SHORT, "A second voice joins in.", "Three is a crowd."]
    refs = [reference_pcm(pipelined_engine, synth, t, layout, seed=20 + i) for i, t in enumerate(texts)]

    async def run():
        streams = [pipelined_engine.open_stream(options(seed=20 + i, silence_threshold_dbfs=None, layout=layout),
                                                t, end_input=True) for i, t in enumerate(texts)]
        return await asyncio.gather(*(collect(s) for s in streams))

    for events, (_, ref_s16, frames) in zip(asyncio.run(run()), refs):
        assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos"
        assert events[-1].frames == frames - 1
        assert_pcm_close(pcm_of(events), ref_s16)
    assert pipelined_engine.pipeline.depth == 2 and max(launches) == 1


def test_eos_read_a_step_late_cuts_the_audio_exactly_at_the_eos_frame(pipelined_engine, synth):
    """Random weights never sample EOS, so the test names a codebook-0 id the stream first makes
    at frame k "EOS": the scheduler learns it one step late, frame k + 1 is already launched and
    chunks may hold frames >= k. The audio must be exactly the decode of frames 1 .. k - 1."""
    seed = 5
    inp = synth.prepare(LONG, VOICE, layout=Layout.NON_STREAMING, params=SamplingParams(seed=seed))
    codes = generate_codes(synth.model, [inp])[0]  # [T, 16]
    c0 = codes[:, 0].tolist()
    k = next(i for i in range(6, len(c0)) if c0[i] not in c0[:i])
    with torch.inference_mode():
        want = pipelined_engine.codec(codes[1:k].T[None]).float()[0].numpy()
    want = np.frombuffer(to_s16le(want), dtype="<i2")
    eos_id = pipelined_engine._eos_id
    pipelined_engine._eos_id = c0[k]
    wasted = pipelined_engine.scheduler.stats["frames_wasted"]
    try:
        async def run():
            s = pipelined_engine.open_stream(options(seed=seed, chunk_schedule=(4,), silence_threshold_dbfs=None),
                                             LONG, end_input=True)
            return await collect(s)

        events = asyncio.run(run())
    finally:
        pipelined_engine._eos_id = eos_id
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos" and events[-1].frames == k - 1
    assert_pcm_close(pcm_of(events), want)
    # The stream is done once its last audio is out, which can be before the engine reads the step
    # holding frame k + 1: count the discarded frame once nothing is in flight.
    wait_until(lambda: pipelined_engine.metrics()["steps_in_flight"] == 0, what="no step in flight")
    assert pipelined_engine.scheduler.stats["frames_wasted"] == wasted + 1  # frame k + 1, discarded


def test_cancel_frees_the_slot_within_one_step_with_pipelining(pipelined_engine, launches):
    eng = pipelined_engine

    delivered: list = []  # what the engine hands the stream, before the client-side filter

    async def run():
        s = eng.open_stream(options(seed=1, chunk_schedule=(1,)), LONG, end_input=True)
        receive = s.receive  # every event the engine sends reaches the stream through it
        s.receive = lambda event: (delivered.append(event), receive(event))
        assert isinstance(await next_event(s), AudioEvent)
        frames = eng.metrics()["frames"]
        s.cancel()
        await asyncio.to_thread(wait_until, lambda: eng.metrics()["active_streams"] == 0, 10.0, "the slot")
        frames_after = eng.metrics()["frames"] - frames
        rest = await collect(s)
        # The slot is free at once: a new stream takes it and runs to the end.
        t = eng.open_stream(options(seed=2, chunk_schedule=(64,)), "Hi.", end_input=True)
        t_events = await collect(t)
        await asyncio.sleep(0.2)
        return frames_after, rest, s._events.qsize(), t_events

    frames_after, rest, left, t_events = asyncio.run(run())
    # Only the step running when the cancel arrived may finish; its successor's row is discarded.
    assert frames_after <= 1, f"{frames_after} frames were read after the cancel"
    assert not any(isinstance(e, AudioEvent) for e in rest) and left == 0
    assert isinstance(rest[-1], DoneEvent) and rest[-1].reason == "cancelled"
    # Engine side (the client filter above would hide it): nothing follows the cancelled stream's
    # Done, so results of steps still in flight at the cancel never reach it.
    done_at = next(i for i, e in enumerate(delivered) if isinstance(e, DoneEvent))
    assert done_at == len(delivered) - 1, delivered[done_at:]
    assert isinstance(t_events[-1], DoneEvent) and t_events[-1].reason == "eos"
    assert max(launches) == 1


def test_chunks_run_between_the_frame_steps_halves_and_ttfa_parts_add_up(pipelined_engine):
    """A step's codec chunks are queued after its codes half and before its talker half (no chunk
    needs the talker half, so first audio comes a talker step sooner); and the engine's
    first-audio breakdown (wake, plan, launch, device) covers each stream's opened -> audio read."""
    eng = pipelined_engine
    order: list[str] = []
    codes_half, feed_half, launch = eng.runner._frame_codes, eng.runner._frame_feed, eng.codec_runner.decode

    def spy(name, fn):
        def wrapped(*args, **kw):
            order.append(name)
            return fn(*args, **kw)
        return wrapped

    eng.runner._frame_codes, eng.runner._frame_feed = spy("codes", codes_half), spy("talker", feed_half)
    eng.codec_runner.decode = spy("chunk", launch)
    before = eng.metrics()
    started = time.perf_counter()
    try:
        async def run():
            return await collect(eng.open_stream(options(seed=3, silence_threshold_dbfs=None), SHORT, end_input=True))

        events = asyncio.run(run())
    finally:
        eng.runner._frame_codes, eng.runner._frame_feed, eng.codec_runner.decode = codes_half, feed_half, launch
    wall = time.perf_counter() - started
    assert isinstance(events[-1], DoneEvent)
    # every chunk call sits between a codes half and the talker half of the same frame step
    for i, name in enumerate(order):
        if name == "chunk":
            prev = next(n for n in reversed(order[:i]) if n != "chunk")
            nxt = next((n for n in order[i + 1:] if n != "chunk"), "talker")
            assert (prev, nxt) == ("codes", "talker"), order
    assert "chunk" in order
    after = eng.metrics()
    assert after["ttfa_count"] == before["ttfa_count"] + 1
    parts = {p: after[f"ttfa_{p}_sum_s"] - before[f"ttfa_{p}_sum_s"] for p in TTFA_PARTS}
    assert all(v >= 0 for v in parts.values()), parts
    assert parts["launch"] > 0  # prefill, frame 0 and frame 1 stand between the prefill and the first chunk
    whole = after["ttfa_sum_s"] - before["ttfa_sum_s"]  # from the engine's drain of the open
    assert 0 < sum(parts.values()) - parts["wake"] <= whole + 1e-6
    # The prefill is handed to the device inside "plan", before its step's frame rows are launched.
    issue = after["ttfa_issue_sum_s"] - before["ttfa_issue_sum_s"]
    assert 0 < issue < parts["plan"], (issue, parts)
    # ... through its queueing for a slot and the start of its step's launch: three spans that add up to it
    spans = {p: after[f"ttfa_{p}_sum_s"] - before[f"ttfa_{p}_sum_s"] for p in ISSUE_PARTS}
    assert all(v > 0 for v in spans.values()) and abs(sum(spans.values()) - issue) < 1e-9, (spans, issue)
    # The engine thread's host time by part: every part of a stream's life shows, within the wall time.
    host = {p: after[f"host_{p}_s"] - before[f"host_{p}_s"] for p in HOST_PARTS}
    assert all(v > 0 for v in host.values()), host
    assert sum(host.values()) <= wall and after["host_iterations"] - before["host_iterations"] >= 3
    # the longest busy iteration is at least as long as these iterations' mean
    assert sum(host.values()) / (after["host_iterations"] - before["host_iterations"]) <= after["host_iteration_max_s"]
    launch_cpu = after["host_launch_cpu_s"] - before["host_launch_cpu_s"]
    assert 0 < launch_cpu <= after["host_cpu_s"] - before["host_cpu_s"] <= wall


def test_first_audio_is_sent_before_its_step_is_read(pipelined_engine, synth):
    """A step's first chunks are launched ahead of its other codec calls and delivered before the
    step's result is read; the scheduler's later AudioReady for them is skipped, so the audio is
    still exactly the reference's, once."""
    eng = pipelined_engine
    early = []
    deliver = eng._deliver_early

    def spy(launched):
        deliver(launched)
        early.extend(launched.early_sent)

    eng._deliver_early = spy
    texts = [SHORT, "A second voice joins in."]
    refs = [reference_pcm(eng, synth, t, Layout.NON_STREAMING, seed=40 + i) for i, t in enumerate(texts)]
    try:
        async def run():
            streams = [eng.open_stream(options(seed=40 + i, silence_threshold_dbfs=None), t, end_input=True)
                       for i, t in enumerate(texts)]
            return await asyncio.gather(*(collect(s) for s in streams))

        results = asyncio.run(run())
    finally:
        eng._deliver_early = deliver
    assert len(early) == len(texts)  # every stream's first chunk went early
    for events, (_, ref_s16, _) in zip(results, refs):
        assert isinstance(events[-1], DoneEvent)
        assert_pcm_close(pcm_of(events), ref_s16)


def test_an_eos_in_the_first_chunk_keeps_it_from_going_early(pipelined_engine, synth):
    """The codebook-0 id of frame 1 named EOS: frame 1 ends the stream, so its chunk must not be
    sent early (or at all): no audio, zero frames."""
    seed = 9
    inp = synth.prepare(LONG, VOICE, layout=Layout.NON_STREAMING, params=SamplingParams(seed=seed))
    c0 = generate_codes(synth.model, [inp])[0][:, 0].tolist()
    assert c0[1] != c0[0]
    eng = pipelined_engine
    eos_id, eng._eos_id = eng._eos_id, c0[1]
    try:
        async def run():
            return await collect(eng.open_stream(options(seed=seed, silence_threshold_dbfs=None), LONG, end_input=True))

        events = asyncio.run(run())
    finally:
        eng._eos_id = eos_id
    assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos" and events[-1].frames == 0
    assert len(pcm_of(events)) == 0


def test_steps_run_one_at_a_time_once_no_stream_needs_lookahead(tiny_checkpoint, one_thread, synth):
    """The default lookahead rule at depth 2: a stream's first frames are launched back to back,
    and once it is more than `lookahead_buffer_s` ahead of its listener (this CPU runs the tiny
    model far faster than real time) each step is read before the next is launched. The audio is
    the reference's either way."""
    eng = start_engine(tiny_checkpoint, pipeline_depth=2, max_active_streams=4, lookahead_buffer_s=0.3)
    unread: list[int] = []
    launch = eng.executor.launch
    eng.executor.launch = lambda plan, entries: (unread.append(len(eng.pipeline)), launch(plan, entries))[1]
    try:
        _, ref_s16, frames = reference_pcm(eng, synth, LONG, Layout.NON_STREAMING, seed=7)

        async def run():
            return await collect(eng.open_stream(options(seed=7, silence_threshold_dbfs=None), LONG, end_input=True))

        events = asyncio.run(run())
    finally:
        asyncio.run(eng.stop())
    assert isinstance(events[-1], DoneEvent) and events[-1].frames == frames - 1
    assert_pcm_close(pcm_of(events), ref_s16)
    assert unread[1] == 1  # frame 1 launched while the prefill + frame 0 step was in flight
    assert frames > 20 and set(unread[-10:]) == {0}  # far ahead of its listener: one step at a time
