"""The real StreamingEngine on the tiny random-weight checkpoint (CPU): event order, audio equal to
the reference loop + full codec decode, input streaming, flush, chunk schedule and word timings."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from tests.engine.helpers import (
    LONG,
    SHORT,
    SPF,
    SR,
    TIMEOUT,
    assert_pcm_close,
    collect,
    next_event,
    options,
    pcm_of,
    reference_pcm,
    state,
    wait_until,
)
from tts_engine.checkpoint import speech_frames
from tts_engine.engine.api import (
    AudioEvent,
    DoneEvent,
    FlushDoneEvent,
    StreamOptions,
)
from tts_engine.engine.audio import find_onset
from tts_engine.engine.core import StreamingEngine
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.scheduler.request import Phase
from tts_engine.text_stream import StreamingTokenizer

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
