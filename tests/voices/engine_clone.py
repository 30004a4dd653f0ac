"""Shared by the CPU and GPU engine tests of cloned voices: the engine's audio for a cloned voice
against the reference loop (codes decoded in one piece, frame 0 kept: cloned voices keep it)."""

from __future__ import annotations

import asyncio

import numpy as np
import torch

from tests.engine.helpers import assert_pcm_close, collect, pcm_of
from tts_engine.engine.api import DoneEvent, StreamOptions
from tts_engine.engine.audio import to_s16le
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.reference import generate_codes
from tts_engine.sampling import SamplingParams

TEXTS = ["Hi there, friend.", "A second voice joins in."]


def reference_s16(synth, text: str, voice: VoiceSpec, layout: Layout, seed: int) -> np.ndarray:
    """The codes decoded in one piece; an in-context voice's with its reference codes in front, cut off at
    the reference's last sample (the official cut is proportional and may keep one sample more)."""
    inp = synth.prepare(text, voice, layout=layout, params=SamplingParams(seed=seed))
    codes = generate_codes(synth.model, [inp])[0]
    ref = voice.cloned.ref_codes if voice.cloned is not None else None
    full = codes if ref is None else torch.cat([ref, codes])
    with torch.inference_mode():
        pcm = synth.codec(full.T[None].to(synth.device)).float()[0].cpu().numpy()
    return np.frombuffer(to_s16le(pcm[-codes.shape[0] * synth.codec.cfg.samples_per_frame:]), dtype="<i2")


def assert_engine_equals_reference(engine, synth, voices: list[VoiceSpec], layout: Layout) -> None:
    async def run():
        streams = [engine.open_stream(StreamOptions(v, SamplingParams(seed=50 + i), silence_threshold_dbfs=None,
                                                    layout=layout), t, end_input=True)
                   for i, (v, t) in enumerate(zip(voices, TEXTS, strict=True))]
        return await asyncio.gather(*(collect(s) for s in streams))

    for i, (events, voice, text) in enumerate(zip(asyncio.run(run()), voices, TEXTS, strict=True)):
        assert isinstance(events[-1], DoneEvent)
        # The engine runs in-context voices in the non-streaming layout: their prompt holds the whole text.
        used = Layout.NON_STREAMING if voice.cloned.in_context else layout
        assert_pcm_close(pcm_of(events), reference_s16(synth, text, voice, used, seed=50 + i))
