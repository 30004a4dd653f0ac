"""The engine's codec path (CPU, tiny checkpoint): streams whose chunks are due in the same step
share one CodecRunner call per chunk length, and every stream's audio still equals a one-piece
decode of its own codes, also in slots reused by earlier streams; a final chunk padded into a
longer call sends exactly its own audio."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import torch

from tests.engine.helpers import assert_pcm_close, reference_pcm
from tts_engine.engine.api import AudioEvent, DoneEvent, StreamOptions
from tts_engine.engine.audio import to_s16le
from tts_engine.engine.core import StreamingEngine
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.runtime.codec_runner import pcm_to_s16
from tts_engine.sampling import SamplingParams

TEXTS = ["Hi there, friend.", "A second voice joins in.", "Three is a crowd.", "Four.", "And a fifth one.",
         "The sixth ends it."]
SCHEDULES = [(1, 2, 4, 8, 12), (3,), (1, 2, 4, 8, 12), (2, 5), (4, 1), (1, 2, 4, 8, 12)]


def test_due_chunks_are_batched_by_length_and_equal_per_stream_decodes(tiny_checkpoint):
    engine = StreamingEngine(tiny_checkpoint, device="cpu", max_context=512, max_active_streams=4)
    # Codec calls without a fixed cost: no final chunk is ever padded into a longer call, so what
    # a slot decodes is exactly what its stream sends (padding has its own test below).
    engine.scheduler.cost.chunk_s = lambda num_frames, batch: 1e-3 * num_frames * batch
    calls: list[tuple[int, list[int], int]] = []  # (engine step, slots, chunk length)
    codes_of: dict[str, list[torch.Tensor]] = {}
    pcm_of: dict[str, list[torch.Tensor]] = {}
    decode = engine.codec_runner.decode  # the executor's codec entry point

    def spy(slots: list[int], codes: torch.Tensor, *, s16: bool = False) -> torch.Tensor:
        # Runs on the engine thread, where _entries may be read; the warm-up call has no stream. The float
        # PCM is kept; the executor gets what it asked for (decode(s16=True) is it converted: test_codec_runner).
        pcm = decode(slots, codes)
        out = pcm_to_s16(pcm) if s16 else pcm
        by_slot = {e.state.slot: e.state.id for e in engine._entries.values() if e.state.slot is not None}
        if not by_slot:
            return out
        for i, slot in enumerate(slots):
            codes_of.setdefault(by_slot[slot], []).append(codes[i])
            pcm_of.setdefault(by_slot[slot], []).append(pcm[i])
        calls.append((engine.step_count, list(slots), codes.shape[2]))
        return out

    engine.codec_runner.decode = spy
    # Hold the engine loop until every stream is open, so that the first three start together.
    gate = threading.Event()
    step = engine._step

    def gated_step() -> bool:
        gate.wait()
        return step()

    engine._step = gated_step

    async def events(stream) -> tuple[str, list]:
        return stream.id, [e async for e in stream.events()]

    async def run():
        await engine.start()
        try:
            # 6 streams on 4 slots (all four decode in lockstep): the last two reuse freed slots.
            streams = [engine.open_stream(StreamOptions(VoiceSpec("ryan"), SamplingParams(seed=i),
                                                        chunk_schedule=SCHEDULES[i], silence_threshold_dbfs=None),
                                          TEXTS[i], end_input=True) for i in range(len(TEXTS))]
            gate.set()
            return await asyncio.wait_for(asyncio.gather(*(events(s) for s in streams)), 120)
        finally:
            gate.set()
            await engine.stop()

    results = asyncio.run(run())
    assert engine.fault is None
    assert max(len(slots) for _, slots, _ in calls) > 1, calls  # same-length chunks share a call
    lengths_per_step: dict[int, list[int]] = {}
    for step, _, t in calls:
        lengths_per_step.setdefault(step, []).append(t)
    assert any(len(ts) > 1 for ts in lengths_per_step.values()), calls  # a step with several lengths
    assert len({sid for sid, _ in results}) == len(codes_of) == len(TEXTS)
    for sid, events in results:
        assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos"
        with torch.inference_mode():
            full = engine.codec(torch.cat(codes_of[sid], dim=1)[None])[0]
        chunked = torch.cat(pcm_of[sid])
        assert (chunked - full).abs().max().item() <= 1e-4, sid
        # What the stream sent is exactly what its slot decoded (no trimming with threshold None).
        sent = b"".join(e.pcm for e in events if isinstance(e, AudioEvent))
        assert np.array_equal(np.frombuffer(sent, "<i2"), np.frombuffer(to_s16le(chunked.float().numpy()), "<i2"))


def test_a_final_chunk_padded_into_a_longer_call_sends_exactly_its_own_audio(tiny_checkpoint, synth):
    """Two streams start together: a's final 3-frame chunk is due in the step of b's 5-frame chunk.
    With a cost model where every codec call has a large fixed cost, a's chunk rides in b's call,
    padded to 5 frames; both still send exactly the reference audio."""
    engine = StreamingEngine(tiny_checkpoint, device="cpu", max_context=512, max_active_streams=4)
    engine.scheduler.cost.chunk_s = lambda num_frames, batch: 1.0 + 1e-3 * num_frames * batch
    gate = threading.Event()
    step = engine._step
    engine._step = lambda: gate.wait() and step()
    texts, schedules = ["Hi there, friend.", "A second voice joins in, a little longer."], [(4,), (5,)]
    refs = [reference_pcm(engine, synth, t, Layout.NON_STREAMING, seed=30 + i)[1] for i, t in enumerate(texts)]

    async def all_events(stream) -> tuple[str, list]:
        return stream.id, [e async for e in stream.events()]

    async def run():
        await engine.start()
        try:
            streams = [engine.open_stream(StreamOptions(VoiceSpec("ryan"), SamplingParams(seed=30 + i),
                                                        chunk_schedule=schedules[i], silence_threshold_dbfs=None),
                                          texts[i], end_input=True) for i in range(2)]
            gate.set()
            return await asyncio.wait_for(asyncio.gather(*(all_events(s) for s in streams)), 120)
        finally:
            gate.set()
            await engine.stop()

    results = asyncio.run(run())
    assert engine.fault is None and engine.scheduler.stats["padded_chunks"] >= 1
    for (_, got), ref in zip(results, refs):
        assert isinstance(got[-1], DoneEvent) and got[-1].reason == "eos"
        sent = np.frombuffer(b"".join(e.pcm for e in got if isinstance(e, AudioEvent)), "<i2")
        assert_pcm_close(sent, ref)
