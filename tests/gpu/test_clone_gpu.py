"""Cloned voices through the whole engine on CUDA (graphs, Triton kernels, the eager prefill of a
cloned prompt beside graph-replayed steps) equal the CPU reference loop; 1.7B and 0.6B layouts."""

from __future__ import annotations

import asyncio

import pytest
import torch

from bench.voice.turns import recording
from tests.voices.conftest import REFERENCE_TEXT, at_24k
from tests.voices.engine_clone import assert_engine_equals_reference
from tts_engine.checkpoint import make_checkpoint
from tts_engine.engine.core import StreamingEngine
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.scheduler.config import SchedulerConfig
from tts_engine.synthesizer import Synthesizer


@pytest.mark.parametrize("size", ["tiny", "tiny-0.6b"])
@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_cloned_voices_on_cuda_equal_the_cpu_reference(cuda, tmp_path, size, layout):
    path = make_checkpoint(size, tmp_path / size, seed=8, variant="base")
    synth = Synthesizer(path)
    # The GPU machine has no espeak-ng: the reference recording comes from the speech cache made where it is.
    wav = at_24k(recording(REFERENCE_TEXT).read_bytes())
    voices = [VoiceSpec("a", "english", cloned=synth.clone_voice(wav)),
              VoiceSpec("b", "english", cloned=synth.clone_voice(wav, REFERENCE_TEXT))]
    engine = StreamingEngine(path, device="cuda", dtype=torch.float32, max_context=512, max_active_streams=8,
                             scheduler=SchedulerConfig(raise_on_invariant_violation=True), codec_precision="fp32")
    asyncio.run(engine.start())
    try:
        assert engine.runner.use_graphs and engine.runner.use_triton
        assert_engine_equals_reference(engine, synth, voices, layout)
    finally:
        asyncio.run(engine.stop())
    assert engine.fault is None
