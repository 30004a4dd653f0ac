"""A cloned voice's prompt rows: layout (no model) and the engine's embedding of them against the
reference loop's."""

from __future__ import annotations

import pytest
import torch

from tests.voices.conftest import REFERENCE_TEXT
from tts_engine.config import CONFIG_DIR, ModelConfig
from tts_engine.prompt import Layout, VoiceSpec, build_prompt, resolve_voice
from tts_engine.reference import _embed_rows
from tts_engine.voices.clone import ClonePrompt

BASE = ModelConfig.from_dict({**ModelConfig.from_file(CONFIG_DIR / "tiny-customvoice.config.json").raw,
                              "tts_model_type": "base"})
CUSTOM = ModelConfig.from_file(CONFIG_DIR / "tiny-customvoice.config.json")
TEMPLATE = [151644, 77091, 198, 11, 12, 13, 151645, 198, 151644, 77091, 198]  # role, t1..t3, tail
PAD, BOS, EOS = 151671, 151672, 151673


def _clone(frames: int | None, ref_ids=(21, 22)) -> ClonePrompt:
    emb = torch.randn(BASE.talker.hidden_size)
    if frames is None:
        return ClonePrompt(emb)
    return ClonePrompt(emb, torch.randint(0, 2048, (frames, 16)), tuple(ref_ids), "ref")


def test_x_vector_prompt_puts_the_embedding_in_the_speaker_row():
    clone = _clone(None)
    p = build_prompt(BASE, TEMPLATE, VoiceSpec("v", "english", cloned=clone), Layout.NON_STREAMING)
    t = BASE.talker
    assert p.codec_ids[3:10] == (t.codec_think_id, t.codec_think_bos_id, 2050, t.codec_think_eos_id, None,
                                 t.codec_pad_id, t.codec_pad_id)
    assert p.speaker_row == 7 and p.text_ids[7] == PAD and p.clone is clone and p.ref_frames_row is None


@pytest.mark.parametrize(("frames", "layout", "trailing"), [
    (2, Layout.STREAMING, (12, 13, EOS)),  # text (6) longer than codec (3): the rest per decode step
    (9, Layout.STREAMING, ()),  # codec longer: pad under the rest of the frames
    (2, Layout.NON_STREAMING, ()),
])
def test_in_context_layouts(frames, layout, trailing):
    clone = _clone(frames)
    p = build_prompt(BASE, TEMPLATE, VoiceSpec("v", "auto", cloned=clone), layout)
    t = BASE.talker
    head = 3 + 3 + 2  # role, [nothink, think_bos, think_eos], speaker row, codec_pad with tts_bos
    text, codec = p.text_ids[head:], p.codec_ids[head:]
    x = [21, 22, 11, 12, 13, EOS]
    if layout is Layout.NON_STREAMING:
        assert text == (*x, *[PAD] * (frames + 1))
        assert codec == (*[t.codec_pad_id] * len(x), t.codec_bos_id, *[None] * frames)
    else:
        n = frames + 1
        assert text == tuple(x[:n] + [PAD] * max(0, n - len(x)))
        assert codec == (t.codec_bos_id, *[None] * frames)
    assert p.trailing_text_ids == trailing
    assert p.ref_frames_row == len(p) - frames


def test_voices_that_do_not_fit_the_model_are_refused():
    with pytest.raises(ValueError, match="cloned voices only"):
        resolve_voice(BASE, VoiceSpec("voice_0123456789abcdef"))
    with pytest.raises(ValueError, match="need a Base model"):
        resolve_voice(CUSTOM, VoiceSpec("ryan", cloned=_clone(None)))
    with pytest.raises(ValueError, match="another model"):
        resolve_voice(BASE, VoiceSpec("v", cloned=ClonePrompt(torch.zeros(7))))
    with pytest.raises(ValueError, match="no `instructions`"):
        resolve_voice(BASE, VoiceSpec("v", instruct="whisper", cloned=_clone(None)))
    with pytest.raises(ValueError, match="both the reference codes and its transcript"):
        ClonePrompt(torch.zeros(4), torch.zeros(3, 16, dtype=torch.long))


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_engine_embeds_cloned_prompts_as_the_reference_loop_does(tiny_base_checkpoint, reference_24k, layout):
    from tts_engine.engine.core import StreamingEngine
    from tts_engine.synthesizer import Synthesizer
    from tts_engine.voices.rows import embed_clone_prompt

    synth = Synthesizer(tiny_base_checkpoint)
    engine = StreamingEngine(tiny_base_checkpoint, device="cpu")
    for ref_text in (REFERENCE_TEXT, None):
        voice = VoiceSpec("v", "english", cloned=synth.clone_voice(reference_24k, ref_text))
        prompt = synth.prepare("Hello there.", voice, layout=layout).prompt
        ours = embed_clone_prompt(engine.runner, prompt)
        with torch.inference_mode():
            reference = _embed_rows(synth.model, prompt, torch.device("cpu"), torch.float32)
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
        without = engine.runner.embed_prompt(list(prompt.text_ids), list(prompt.codec_ids))
        assert not torch.allclose(ours, without), "the vector rows must change the prompt"
