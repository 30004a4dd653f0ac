"""The whole engine on CUDA (tiny checkpoint, fp32, CUDA graphs, Triton kernels, fused sampler,
pipeline depth 2), as served (prefills on a stream of their own), with prefills on the default stream,
and without the talker's PDL: concurrent streams' audio equals the CPU reference loop decoded in one
piece. Exercises what CPU runs cannot: steps in flight on the device, pinned host copies, a new
stream's prefill beside the steps in flight."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch

from tests.engine.helpers import LONG, SHORT, VOICE, assert_pcm_close, collect, next_event, options, pcm_of
from tts_engine.engine.api import AudioEvent, DoneEvent
from tts_engine.engine.audio import to_s16le
from tts_engine.engine.core import StreamingEngine
from tts_engine.prompt import Layout
from tts_engine.reference import generate_codes
from tts_engine.runtime.options import FastPathOptions
from tts_engine.sampling import SamplingParams
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.synthesizer import Synthesizer


def cpu_reference(synth: Synthesizer, text: str, layout: Layout, seed: int):
    """The reference loop on the CPU, frame 0 dropped, decoded in one piece -> (s16 PCM, frames)."""
    inp = synth.prepare(text, VOICE, layout=layout, params=SamplingParams(seed=seed))
    codes = generate_codes(synth.model, [inp])[0]
    with torch.inference_mode():
        pcm = synth.codec(codes[1:].T[None]).float()[0].numpy()
    return np.frombuffer(to_s16le(pcm), dtype="<i2"), len(codes)


# (prefill stream, talker PDL): the served defaults (the prefill stream on with CUDA; the talker's batch-1
# steps with programmatic dependent launch); prefills on the default stream; the served defaults without
# the talker's PDL.
@pytest.fixture(scope="module", params=[(None, None), (False, None), (None, False)],
                ids=["served_defaults", "prefills_on_the_default_stream", "no_talker_pdl"])
def cuda_engine(request, cuda, tiny_checkpoint):
    prefill_stream, talker_pdl = request.param
    cfg = SchedulerConfig(raise_on_invariant_violation=True)
    # Exact fp32 codec: the comparison with the CPU reference is to 1 LSB; the served default (TF32)
    # is measured against fp32 by bench.stages. The codec tick, early first
    # audio and the fused SnakeBeta run as served.
    engine = StreamingEngine(tiny_checkpoint, device="cuda", dtype=torch.float32, max_context=512,
                             max_active_streams=8, scheduler=cfg, prefill_stream=prefill_stream, codec_precision="fp32",
                             fast_path=FastPathOptions(talker_pdl=talker_pdl))
    asyncio.run(engine.start())
    assert engine.pipeline.depth == 2 and engine.runner.use_graphs and engine.runner.use_triton
    assert (engine.runner.prefill_stream is not None) == (prefill_stream is not False)
    assert engine.runner.talker_pdl == (talker_pdl is not False) and engine.runner.code_predictor.fused_attention
    yield engine
    asyncio.run(engine.stop())
    assert engine.fault is None


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_concurrent_streams_on_cuda_equal_the_cpu_reference(cuda_engine, tiny_checkpoint, layout):
    synth = Synthesizer(tiny_checkpoint)
    texts = [SHORT, "A second voice joins in.", "Three is a crowd, and four is more."]
    refs = [cpu_reference(synth, t, layout, seed=40 + i) for i, t in enumerate(texts)]

    async def run():
        streams = [cuda_engine.open_stream(options(seed=40 + i, silence_threshold_dbfs=None, layout=layout),
                                           t, end_input=True) for i, t in enumerate(texts)]
        return await asyncio.gather(*(collect(s) for s in streams))

    busy0, t0 = cuda_engine.stats["device_busy_s"], time.monotonic()
    results = asyncio.run(run())
    # The device's busy time (each step's CUDA events, start to end) is counted, and within the wall time.
    stats = cuda_engine.stats
    assert 0 < stats["device_busy_s"] - busy0 < time.monotonic() - t0
    assert stats["device_frame_s"] > 0 and stats["device_codec_s"] > 0
    # parts of the steps, on the same stream (CUDA event times have a resolution of ~0.5 µs)
    assert stats["device_frame_s"] + stats["device_codec_s"] <= stats["device_busy_s"] * 1.01
    for events, (ref_s16, frames) in zip(results, refs):
        assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos"
        assert events[-1].frames == frames - 1
        assert_pcm_close(pcm_of(events), ref_s16)
    assert cuda_engine.scheduler.violations(idle=True) == []


def test_newcomers_beside_a_decoding_stream_equal_the_cpu_reference(cuda_engine, tiny_checkpoint):
    """Streams that arrive while another decodes: with the prefill stream their prefill runs beside the
    other's steps in flight, then they join them; the audio is the reference's either way."""
    synth = Synthesizer(tiny_checkpoint)
    texts = ["A second voice joins in.", "Three is a crowd, and four is more."]
    refs = [cpu_reference(synth, t, Layout.NON_STREAMING, seed=70 + i) for i, t in enumerate(texts)]

    async def run():
        first = cuda_engine.open_stream(options(seed=69), LONG, end_input=True)
        assert isinstance(await next_event(first), AudioEvent)
        streams = [cuda_engine.open_stream(options(seed=70 + i, silence_threshold_dbfs=None), t, end_input=True)
                   for i, t in enumerate(texts)]
        results = await asyncio.gather(*(collect(s) for s in streams))
        first.cancel()
        await collect(first)
        return results

    for events, (ref_s16, frames) in zip(asyncio.run(run()), refs):
        assert isinstance(events[-1], DoneEvent) and events[-1].reason == "eos"
        assert events[-1].frames == frames - 1
        assert_pcm_close(pcm_of(events), ref_s16)
    assert cuda_engine.scheduler.violations(idle=True) == []


def test_the_engine_thread_never_synchronizes_the_device(cuda_engine):
    """With torch's sync debug mode set to error (after warm-up), three streams start, decode and
    finish: any op that makes the host wait for the device (a pageable host-to-device copy such as
    `device_tensor[i] = value`, an `.item()`) raises in the engine thread, which faults the engine.
    Waits on the engine's own CUDA events (reading a finished step) are not such ops. The module's
    engines are reused (a third engine's start does not fit the GPU tests' time limit)."""

    async def run():
        streams = [cuda_engine.open_stream(options(seed=60 + i), text, end_input=True)
                   for i, text in enumerate((SHORT, "Another voice.", SHORT))]
        return await asyncio.gather(*(collect(s) for s in streams))

    torch.cuda.set_sync_debug_mode("error")
    try:
        results = asyncio.run(run())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert cuda_engine.fault is None, cuda_engine.fault
    assert all(isinstance(events[-1], DoneEvent) for events in results)
