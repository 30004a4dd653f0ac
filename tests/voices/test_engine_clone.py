"""The streaming engine (CPU) with cloned voices equals the reference loop, both modes at once."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.helpers import start_engine
from tests.voices.conftest import REFERENCE_TEXT
from tests.voices.engine_clone import assert_engine_equals_reference
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.synthesizer import Synthesizer


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_engine_with_cloned_voices_equals_the_reference_loop(tiny_base_checkpoint, reference_24k, layout):
    synth = Synthesizer(tiny_base_checkpoint)
    voices = [VoiceSpec("a", "english", cloned=synth.clone_voice(reference_24k)),
              VoiceSpec("b", "english", cloned=synth.clone_voice(reference_24k, REFERENCE_TEXT))]
    engine = start_engine(tiny_base_checkpoint)
    try:
        assert_engine_equals_reference(engine, synth, voices, layout)
    finally:
        asyncio.run(engine.stop())
