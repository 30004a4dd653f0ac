"""The engine with the newcomer lane (SchedulerConfig.newcomer_lane) on CPU, where the lane's steps run
synchronously through the main runners: streams that arrive while another decodes go through the
lane and their audio still equals the reference loop's; cancel in the lane; the engine ends empty.
The CUDA side (a stream of its own, batch-1 graphs beside the main ones) is tests/gpu/test_engine_gpu.py's."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.helpers import (
    LONG,
    SHORT,
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
from tts_engine.prompt import Layout


@pytest.fixture(scope="module")
def lane_engine(tiny_checkpoint, one_thread):
    eng = start_engine(tiny_checkpoint, pipeline_depth=2, codec_tick_steps=2, yield_buffer_s=1e9, newcomer_lane=True,
                       max_active_streams=8)
    assert eng.lane is not None
    yield eng
    asyncio.run(eng.stop())
    assert eng.fault is None


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_newcomers_beside_a_decoding_stream_go_through_the_lane_and_equal_the_reference(lane_engine, synth, layout):
    eng = lane_engine
    texts = ["A second voice joins in.", "Three is a crowd."]
    refs = [reference_pcm(eng, synth, t, layout, seed=30 + i) for i, t in enumerate(texts)]
    lanes_before = eng.scheduler.stats["lane_streams"]

    async def run():
        first = eng.open_stream(options(seed=29, silence_threshold_dbfs=None), LONG, end_input=True)
        assert isinstance(await next_event(first), AudioEvent)  # decoding: newcomers may take the lane
        streams = [eng.open_stream(options(seed=30 + i, silence_threshold_dbfs=None, layout=layout), t, end_input=True)
                   for i, t in enumerate(texts)]
        results = await asyncio.gather(*(collect(s) for s in streams))
        first.cancel()
        await collect(first)
        return results

    results = asyncio.run(run())
    for events, (_, ref_s16, frames) in zip(results, refs):
        assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos"
        assert events[-1].frames == frames - 1
        assert_pcm_close(pcm_of(events), ref_s16)
    assert eng.scheduler.stats["lane_streams"] > lanes_before


def test_a_streaming_newcomer_goes_through_the_lane_and_its_text_keeps_coming(lane_engine, synth):
    """Opened with the text its first chunk needs (the lane's condition), the rest word by word."""
    eng = lane_engine
    text = "Words arrive one by one here, and more of them after."
    _, ref_s16, frames = reference_pcm(eng, synth, text, Layout.STREAMING, seed=41)
    lanes_before = eng.scheduler.stats["lane_streams"]

    async def run():
        first = eng.open_stream(options(seed=40, silence_threshold_dbfs=None), LONG, end_input=True)
        assert isinstance(await next_event(first), AudioEvent)
        words = text.split(" ")
        s = eng.open_stream(options(seed=41, silence_threshold_dbfs=None, layout=Layout.STREAMING),
                            " ".join(words[:4]))
        for w in words[4:]:
            await asyncio.sleep(0.05)
            s.append(" " + w)
        s.end_input()
        events = await collect(s)
        first.cancel()
        await collect(first)
        return events

    events = asyncio.run(run())
    assert isinstance(events[-1], DoneEvent) and events[-1].frames == frames - 1
    assert_pcm_close(pcm_of(events), ref_s16)
    assert eng.scheduler.stats["lane_streams"] == lanes_before + 1


def test_cancel_of_a_stream_the_lane_took_frees_everything(lane_engine):
    """Cancelled once the lane has taken it (on CPU its lane steps are done by then; cancels with lane
    steps in flight are the fake loop's tests): its slot goes to the next newcomer, nothing leaks."""
    eng = lane_engine
    lanes_before = eng.scheduler.stats["lane_streams"]

    async def run():
        first = eng.open_stream(options(seed=50), LONG, end_input=True)
        assert isinstance(await next_event(first), AudioEvent)
        gone = eng.open_stream(options(seed=51), LONG, end_input=True)
        await asyncio.to_thread(wait_until, lambda: eng.scheduler.stats["lane_streams"] > lanes_before, 10.0,
                                "the lane to take the stream")
        gone.cancel()
        after = eng.open_stream(options(seed=52), SHORT, end_input=True)
        results = await collect(gone), await collect(after)
        first.cancel()
        return *results, await collect(first)

    gone, after, first = asyncio.run(run())
    assert eng.scheduler.stats["lane_streams"] >= lanes_before + 1
    assert isinstance(gone[-1], DoneEvent) and gone[-1].reason == "cancelled"
    assert isinstance(after[-1], DoneEvent) and after[-1].reason == "eos"
    assert first[-1].reason == "cancelled"
