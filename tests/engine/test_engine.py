"""The real StreamingEngine on the tiny random-weight checkpoint (CPU): event order, audio equal to
the reference loop + full codec decode, input streaming, flush, cancel in every phase, admission,
input validation, chunk schedule and word timings. After every test the engine holds nothing."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import numpy as np
import pytest
import torch

from tts_engine.checkpoint import speech_frames
from tts_engine.engine.api import (
    AdmissionError,
    AudioEvent,
    DoneEvent,
    ErrorEvent,
    FlushDoneEvent,
    StreamOptions,
)
from tts_engine.engine.audio import find_onset, to_s16le
from tts_engine.engine.core import StreamingEngine
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.reference import generate_codes
from tts_engine.sampling import SamplingParams
from tts_engine.scheduler.request import Phase
from tts_engine.synthesizer import Synthesizer
from tts_engine.text_stream import StreamingTokenizer

SPF = 1920
SR = 24000
VOICE = VoiceSpec("ryan")
SHORT = "Hi there, friend."  # 16 frames
LONG = " ".join(["This sentence keeps the stream busy for a good while."] * 4)  # ~190 frames
TIMEOUT = 60.0


def options(seed: int = 7, **kw) -> StreamOptions:
    return StreamOptions(VOICE, SamplingParams(seed=seed), **kw)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # The tiny model's ops are microseconds long: one thread is ~10x faster than two on a busy CI box.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _start(path, **caps) -> StreamingEngine:
    engine = StreamingEngine(path, device="cpu", max_context=512, **caps)
    asyncio.run(engine.start())
    return engine


@pytest.fixture(scope="module")
def engine(tiny_checkpoint, one_thread):
    eng = _start(tiny_checkpoint, max_active_streams=24)
    yield eng
    asyncio.run(eng.stop())
    assert eng.fault is None


@pytest.fixture(scope="module")
def small_engine(tiny_checkpoint, one_thread):
    eng = _start(tiny_checkpoint, max_active_streams=1, max_queued_streams=1)
    yield eng
    asyncio.run(eng.stop())
    assert eng.fault is None


@pytest.fixture(autouse=True)
def engines_empty_after_each_test(request):
    yield
    for name in ("engine", "small_engine"):
        if name in request.fixturenames:
            assert_empty(request.getfixturevalue(name))


@pytest.fixture(scope="module")
def synth(tiny_checkpoint) -> Synthesizer:
    return Synthesizer(tiny_checkpoint)


def wait_until(cond: Callable[[], bool], timeout: float = TIMEOUT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def assert_empty(engine: StreamingEngine, timeout: float = 5.0) -> None:
    """No stream admitted, every slot free (free + in use == total), nothing decoding."""
    wait_until(lambda: engine.metrics()["active_streams"] == 0, timeout, "an empty engine")
    m = engine.metrics()
    assert m["decoding_streams"] == 0 and m["queued_streams"] == 0, m
    assert sorted(engine._free_slots) == list(range(engine.max_active))
    assert not engine._entries
    assert engine.fault is None and engine.alive


def state(engine: StreamingEngine, stream):
    entry = engine._entries.get(stream.id)
    return None if entry is None else entry.state


async def collect(stream, timeout: float = TIMEOUT) -> list:
    async def run():
        return [e async for e in stream.events()]

    return await asyncio.wait_for(run(), timeout)


async def next_event(stream, timeout: float = TIMEOUT):
    return await asyncio.wait_for(stream._events.get(), timeout)


def pcm_of(events) -> np.ndarray:
    return np.frombuffer(b"".join(e.pcm for e in events if isinstance(e, AudioEvent)), dtype="<i2")


def reference_pcm(engine: StreamingEngine, synth: Synthesizer, text: str, layout: Layout, seed: int):
    """The same request through the reference loop, frame 0 dropped (as the engine does for a
    built-in voice), decoded in one piece -> (float PCM, s16 PCM, frames)."""
    inp = synth.prepare(text, VOICE, layout=layout, params=SamplingParams(seed=seed))
    codes = generate_codes(synth.model, [inp])[0]
    with torch.inference_mode():
        pcm = engine.codec(codes[1:].T[None]).float()[0].numpy()
    return pcm, np.frombuffer(to_s16le(pcm), dtype="<i2"), len(codes)


def assert_pcm_close(got: np.ndarray, want: np.ndarray) -> None:
    assert len(got) == len(want), f"{len(got)} samples != {len(want)} ({len(got) / SPF} vs {len(want) / SPF} frames)"
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, f"max difference {diff.max()} LSB at sample {int(diff.argmax())}"


# -- one stream, start to end -----------------------------------------------------------------

def test_full_text_stream_gives_audio_then_one_done(engine, synth):
    threshold = -20.0  # above the tiny codec's first milliseconds: some leading audio is trimmed
    ref_float, ref_s16, frames = reference_pcm(engine, synth, SHORT, Layout.NON_STREAMING, seed=7)
    trim = find_onset(ref_float, threshold)
    assert trim is not None and 0 < trim < len(ref_s16), f"precondition: onset {trim} should cut something"

    async def run():
        s = engine.open_stream(options(silence_threshold_dbfs=threshold), SHORT, end_input=True)
        return await collect(s)

    events = asyncio.run(run())
    assert all(isinstance(e, AudioEvent) for e in events[:-1]) and len(events) > 2
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "eos"  # a forced length stands for EOS
    assert frames == speech_frames(SHORT, 14.5) and done.frames == frames - 1  # frame 0 is dropped
    pcm = pcm_of(events)
    assert len(pcm) == done.frames * SPF - trim
    assert_pcm_close(pcm, ref_s16[trim:])
    assert done.audio_s == pytest.approx(len(pcm) / SR)
    # Chunks are numbered from 0 and back to back.
    audio = events[:-1]
    assert [e.index for e in audio] == list(range(len(audio)))
    starts = np.cumsum([0] + [len(e.pcm) // 2 for e in audio[:-1]]) / SR
    assert [e.start_s for e in audio] == pytest.approx(list(starts), abs=1e-6)


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_streamed_audio_equals_full_decode_of_reference_codes(engine, synth, layout):
    """Engine (fast path + incremental codec on the chunk schedule) == reference loop + one-piece
    codec decode. In the streaming layout this also proves tts_eos follows the last token."""
    _, ref_s16, frames = reference_pcm(engine, synth, SHORT, layout, seed=3)

    async def run():
        s = engine.open_stream(options(seed=3, silence_threshold_dbfs=None, layout=layout), SHORT, end_input=True)
        return await collect(s)

    events = asyncio.run(run())
    assert events[-1].frames == frames - 1
    assert_pcm_close(pcm_of(events), ref_s16)


def test_max_frames_caps_a_random_weight_stream(engine):
    async def run():
        s = engine.open_stream(options(max_frames=4, silence_threshold_dbfs=None), LONG, end_input=True)
        return await collect(s)

    events = asyncio.run(run())
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.reason == "length" and done.frames == 3
    assert len(pcm_of(events)) == 3 * SPF


# -- input streaming ------------------------------------------------------------------------------

# As an LLM streams it: the first piece has a leading space, which is not spoken (as at open).
WORDS = [" Hello", " there,", " my", " good", " old", " friend."]


def test_word_by_word_input_gives_the_same_audio_as_full_text(engine):
    text = "".join(WORDS).lstrip()

    async def full():
        s = engine.open_stream(options(seed=5, layout=Layout.STREAMING), text, end_input=True)
        return await collect(s)

    async def word_by_word():
        s = engine.open_stream(options(seed=5))
        events = asyncio.create_task(collect(s))
        for word in WORDS:
            await asyncio.sleep(0.03)
            s.append(word)
        s.end_input()
        return await events

    a, b = asyncio.run(full()), asyncio.run(word_by_word())
    assert isinstance(a[-1], DoneEvent) and isinstance(b[-1], DoneEvent)
    assert a[-1].frames == b[-1].frames == speech_frames(text, 14.5) - 1
    assert pcm_of(a).tobytes() == pcm_of(b).tobytes()
    assert [w.word for e in a[:-1] for w in e.words] == [w.word for e in b[:-1] for w in e.words]


def test_stream_stalls_until_the_next_token_arrives_then_resumes(engine):
    tok = StreamingTokenizer(engine.tokenizer)

    async def run():
        s = engine.open_stream(options(seed=9))  # streaming layout, no text yet
        events = asyncio.create_task(collect(s))
        await asyncio.sleep(0.2)
        assert state(engine, s).phase is Phase.WAITING_TEXT and state(engine, s).frames_done == 0
        committed = 0
        for piece in ("Hello there my", " good old", " friend, how are"):
            s.append(piece)
            committed += len(tok.push(piece))
            # Frame k needs text token k + 2: with n tokens the stream stops after n - 1 frames.
            await asyncio.to_thread(wait_until, lambda n=committed: state(engine, s).frames_done == n - 1,
                                    TIMEOUT, f"{committed - 1} frames")
            steps = engine.step_count
            await asyncio.to_thread(wait_until, lambda st=steps: engine.step_count >= st + 5, TIMEOUT, "5 steps")
            assert state(engine, s).frames_done == committed - 1, "produced a frame without its text"
        s.end_input()  # the rest of the text, then tts_eos, then pad until the forced length
        return await events, committed

    events, committed = asyncio.run(run())
    assert committed >= 4
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.frames == speech_frames("Hello there my good old friend, how are",
                                                                        14.5) - 1


def test_flush_completes_without_more_text_then_the_stream_continues(engine):
    async def run():
        s = engine.open_stream(options(seed=4, chunk_schedule=(4,), silence_threshold_dbfs=None), "Hello there my fri")
        s.flush()  # commits the partial word too
        before = []
        while not isinstance(event := await next_event(s, 30.0), FlushDoneEvent):
            assert isinstance(event, AudioEvent), event
            before.append(event)
        n = len(state(engine, s).content_ids)
        frames_done = state(engine, s).frames_done
        s.append("end of it")
        s.end_input()
        return before, n, frames_done, await collect(s)

    before, n, frames_done, after = asyncio.run(run())
    # Every frame the flushed text allows (0 .. n - 2) exists and its audio was sent, in chunks of
    # 4 frames and a short one.
    assert frames_done == n - 1
    assert len(pcm_of(before)) == (n - 2) * SPF
    assert isinstance(after[-1], DoneEvent) and after[-1].reason == "eos"
    assert not any(isinstance(e, FlushDoneEvent) for e in after)


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


# -- chunks and word timings ---------------------------------------------------------------------

def test_chunk_schedule_and_word_timings(engine):
    text = "One two three, four five six seven."

    async def run():
        s = engine.open_stream(options(seed=2, chunk_schedule=(1, 2, 4), silence_threshold_dbfs=None), text)
        s.end_input()
        return await collect(s)

    events = asyncio.run(run())
    audio, done = events[:-1], events[-1]
    frames = [len(e.pcm) // (2 * SPF) for e in audio]
    assert all(len(e.pcm) % (2 * SPF) == 0 for e in audio)
    assert frames[:3] == [1, 2, 4] and all(f == 4 for f in frames[3:-1]) and 1 <= frames[-1] <= 4, frames
    assert sum(frames) == done.frames == speech_frames(text, 14.5) - 1
    total = len(pcm_of(events)) / SR
    words = [(w, e) for e in audio for w in e.words]
    assert [w.word for w, _ in words] == text.split()
    starts = [w.start_s for w, _ in words]
    assert starts == sorted(starts) and starts[0] == 0.0
    for w, e in words:
        assert 0.0 <= w.start_s <= w.end_s <= total + 1e-9, w
        assert w.start_s <= e.start_s + e.duration_s + 1e-9, "a word is sent before its audio"
    for (w, _), (nxt, _) in itertools.pairwise(words):
        assert w.end_s <= nxt.start_s + 1e-9
    assert words[-1][0].end_s == pytest.approx(total, abs=1e-3)


def test_appended_text_is_limited_in_total_not_per_piece(tiny_checkpoint):
    async def run():
        engine = StreamingEngine(tiny_checkpoint, max_active_streams=2, max_text_chars=20)
        await engine.start()
        try:
            stream = engine.open_stream(StreamOptions(VoiceSpec("ryan", "english")), "twelve chars")
            stream.append(" 8 chars")  # 20 in all: at the limit
            with pytest.raises(ValueError, match="longer than 20"):
                stream.append("!")
            stream.cancel()
            async for _ in stream.events():
                pass
        finally:
            await engine.stop()

    asyncio.run(run())
