"""The real StreamingEngine on the tiny checkpoint (CPU): cancel in every phase, admission caps,
input validation. After every test the engine holds nothing."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.helpers import LONG, SHORT, SPF, VOICE, assert_empty, collect, next_event, options, state, wait_until
from tts_engine.engine.api import (
    AdmissionError,
    AudioEvent,
    DoneEvent,
    ErrorEvent,
    StreamOptions,
)
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.sampling import SamplingParams
from tts_engine.scheduler.request import Phase

# -- cancel -------------------------------------------------------------------------------------


def test_cancel_while_decoding_frees_the_slot_within_one_step(engine):
    cancelled_before = engine.metrics()["cancelled"]

    async def run():
        s = engine.open_stream(options(seed=1, chunk_schedule=(1,)), LONG, end_input=True)
        first = await next_event(s)
        assert isinstance(first, AudioEvent)
        # The stream is alone: each decoding step makes one frame. (step_count also counts the
        # idle iterations that follow a command, so frames measure decoding steps.)
        frames = engine.metrics()["frames"]
        s.cancel()
        await asyncio.to_thread(wait_until, lambda: engine.metrics()["active_streams"] == 0, 10.0, "the slot")
        frames_after = engine.metrics()["frames"] - frames
        rest = await collect(s)
        await asyncio.sleep(0.2)  # a few more engine steps: nothing else arrives
        return frames_after, rest, s._events.qsize()

    frames_after, rest, left = asyncio.run(run())
    # Only the step already running when the cancel arrived may finish; the next one frees the slot.
    assert frames_after <= 1, f"{frames_after} decoding steps ran before the slot was freed"
    assert not any(isinstance(e, AudioEvent) for e in rest)
    assert isinstance(rest[-1], DoneEvent) and rest[-1].reason == "cancelled"
    assert sum(isinstance(e, DoneEvent) for e in rest) == 1 and left == 0
    assert engine.metrics()["cancelled"] == cancelled_before + 1


def test_cancel_while_waiting_for_text(engine):
    async def run():
        s = engine.open_stream(options())
        await asyncio.to_thread(wait_until, lambda: state(engine, s) is not None, 10.0, "the open")
        assert state(engine, s).phase is Phase.WAITING_TEXT
        s.cancel()
        s.cancel()  # twice: one DoneEvent
        return await collect(s)

    events = asyncio.run(run())
    assert len(events) == 1 and isinstance(events[0], DoneEvent) and events[0].reason == "cancelled"
    assert events[0].frames == 0


def test_cancel_right_after_open_and_after_done(engine):
    async def run():
        a = engine.open_stream(options(), SHORT, end_input=True)
        a.cancel()  # before the engine has even seen the open
        b = engine.open_stream(options(chunk_schedule=(64,)), "Hi.", end_input=True)
        b_events = await collect(b)
        b.cancel()  # after its DoneEvent: ignored
        await asyncio.sleep(0.2)
        return await collect(a), b_events, b._events.qsize()

    a_events, b_events, left = asyncio.run(run())
    assert [type(e) for e in a_events] == [DoneEvent] and a_events[0].reason == "cancelled"
    assert isinstance(b_events[-1], DoneEvent) and b_events[-1].reason == "eos" and left == 0


def test_many_streams_each_cancelled_after_n_chunks_get_exactly_n(engine):
    async def one(i: int) -> tuple[int, int, DoneEvent]:
        n = 1 + i % 3
        s = engine.open_stream(options(seed=100 + i, chunk_schedule=(1,), silence_threshold_dbfs=None),
                               LONG, end_input=True)
        got = 0
        async for event in s.events():
            if isinstance(event, AudioEvent):
                got += 1
                assert len(event.pcm) == 2 * SPF
                if got == n:
                    s.cancel()
            elif isinstance(event, DoneEvent):
                return n, got, event
        raise AssertionError("no DoneEvent")

    async def run():
        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(20))), 120)

    for n, got, done in asyncio.run(run()):
        assert got == n and done.reason == "cancelled"


# -- admission and validation --------------------------------------------------------------------

def test_admission_caps_active_plus_queued_and_cancel_while_queued(small_engine):
    eng = small_engine
    rejected = eng.metrics()["rejected"]

    async def run():
        a = eng.open_stream(options(seed=1, chunk_schedule=(1,)), LONG, end_input=True)
        b = eng.open_stream(options(seed=2), LONG, end_input=True)
        with pytest.raises(AdmissionError):
            eng.open_stream(options(seed=3), SHORT, end_input=True)
        assert isinstance(await next_event(a), AudioEvent)
        assert state(eng, b).phase is Phase.QUEUED  # no free slot
        b.cancel()
        b_events = await collect(b)
        # a keeps going after its neighbour's cancel.
        assert isinstance(await next_event(a), AudioEvent)
        a.cancel()
        a_events = await collect(a)
        await asyncio.to_thread(assert_empty, eng)
        # Capacity is back.
        c = eng.open_stream(options(seed=4, chunk_schedule=(64,)), "Hi.", end_input=True)
        return b_events, a_events, await collect(c)

    b_events, a_events, c_events = asyncio.run(run())
    assert [type(e) for e in b_events] == [DoneEvent] and b_events[0].reason == "cancelled"
    assert a_events[-1].reason == "cancelled"
    assert isinstance(c_events[-1], DoneEvent) and c_events[-1].reason == "eos"
    assert eng.metrics()["rejected"] == rejected + 1


@pytest.mark.parametrize(("opts", "text", "end"), [
    (StreamOptions(VoiceSpec("nobody")), SHORT, True),
    (StreamOptions(VoiceSpec("ryan", language="klingon")), SHORT, True),
    (StreamOptions(VoiceSpec(None)), SHORT, True),
    (options(chunk_schedule=(0,)), SHORT, True),
    (options(chunk_schedule=()), SHORT, True),
    (options(chunk_schedule=(65,)), SHORT, True),
    (options(silence_threshold_dbfs=3.0), SHORT, True),
    (options(max_frames=0), SHORT, True),
    (StreamOptions(VOICE, SamplingParams(temperature=0.0)), SHORT, True),
    (StreamOptions(VOICE, SamplingParams(top_p=0.0)), SHORT, True),
    (StreamOptions(VOICE, SamplingParams(top_k=-1)), SHORT, True),
    (StreamOptions(VOICE, SamplingParams(seed=-1)), SHORT, True),
    (StreamOptions(VOICE, SamplingParams(seed=2**63)), SHORT, True),
    (options(), "", True),
    (options(), "  \n ", True),
    (options(), "x" * 20_001, False),
], ids=["voice", "language", "no-voice", "chunk-0", "chunk-empty", "chunk-65", "threshold", "max-frames",
        "temperature", "top-p", "top-k", "seed-negative", "seed-too-big", "empty", "blank", "too-long"])
def test_invalid_open_raises_value_error_and_admits_nothing(engine, opts, text, end):
    before = engine.metrics()

    async def run():
        with pytest.raises(ValueError):
            engine.open_stream(opts, text, end_input=end)

    asyncio.run(run())
    after = engine.metrics()
    assert after["admitted"] == before["admitted"] and after["rejected"] == before["rejected"]
    assert after["active_streams"] == 0


def test_empty_or_unusable_input_ends_the_stream_with_an_error(engine):
    async def run():
        s = engine.open_stream(options())
        s.end_input()  # no text at all
        with pytest.raises(ValueError):
            s.append("too late")
        t = engine.open_stream(options(layout=Layout.NON_STREAMING), "Hi there")  # needs the whole text
        u = engine.open_stream(options())
        with pytest.raises(ValueError):
            u.append("x" * 20_001)  # one piece over max_text_chars
        u.append("   ")
        u.end_input()  # only whitespace
        return await collect(s), await collect(t), await collect(u)

    for events in asyncio.run(run()):
        assert len(events) == 1 and isinstance(events[0], ErrorEvent) and events[0].code == "invalid_input", events


