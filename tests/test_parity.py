"""Greedy parity with the official qwen-tts 0.1.1 package on the same random-weight checkpoint.

Both sides load the same directory: the official wrapper (`Qwen3TTSModel.from_pretrained`, its
own processor/tokenizer, generate, speech-tokenizer decode) and our Synthesizer (our tokenizer,
prompt builder, reference loop, codec). Codes must be identical on all 16 codebooks; PCM equal
within 1e-4 (fp32).

The official package does not know our random-weight length rule, so on our side the forced
length is switched off for these comparisons (`forced_frames=None`): both stop on EOS or after
FRAMES frames.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.sampling import SamplingParams
from tts_engine.synthesizer import Synthesizer

FRAMES = 10
TEXTS = ["The birch canoe slid on the smooth planks.", "Hi!",
         "Glue the sheet to the dark blue background, then wait\nfor it to dry."]


@pytest.fixture(scope="module")
def ours(tiny_checkpoint):
    return Synthesizer(tiny_checkpoint)


@pytest.fixture(scope="module")
def theirs(official, tiny_checkpoint):
    return _load_official(official, tiny_checkpoint)


def _load_official(official, path):
    model = official.Qwen3TTSModel.from_pretrained(str(path), dtype=torch.float32, attn_implementation="sdpa")
    captured = []
    generate = model.model.generate

    def spy(*args, **kwargs):
        out = generate(*args, **kwargs)
        captured.append([c.cpu() for c in out[0]])
        return out

    model.model.generate = spy
    model.captured = captured
    return model


def _official_run(model, method: str, **kwargs):
    model.captured.clear()
    wavs, sr = getattr(model, method)(do_sample=False, subtalker_dosample=False,
                                      max_new_tokens=FRAMES + 1, **kwargs)
    assert sr == 24000
    return model.captured[-1], wavs


def _ours_run(synth: Synthesizer, texts, voice: VoiceSpec, layout: Layout):
    greedy = SamplingParams.greedy()
    items = [synth.prepare(t, voice, layout=layout, params=greedy, max_frames=FRAMES) for t in texts]
    items = [replace(item, forced_frames=None) for item in items]
    return synth.synthesize(items)


def _assert_same(their_codes, their_wavs, our_speech):
    assert len(their_codes) == len(our_speech)
    for codes, wav, speech in zip(their_codes, their_wavs, our_speech):
        assert codes.shape == speech.codes.shape == (FRAMES, 16)
        assert torch.equal(codes, speech.codes)
        assert len(set(speech.codes[:, 0].tolist())) > 1, "degenerate codes prove nothing"
        assert wav.shape == speech.pcm.shape
        assert np.abs(wav - speech.pcm).max() <= 1e-4


CUSTOM_VOICE_CASES = {
    "non_streaming": (TEXTS[:1], VoiceSpec("ryan", "english"), Layout.NON_STREAMING),
    "streaming": (TEXTS[:1], VoiceSpec("ryan", "english"), Layout.STREAMING),
    "instruct": (TEXTS[:1], VoiceSpec("vivian", "english", "Speak slowly, in a warm and calm voice."),
                 Layout.NON_STREAMING),
    "language_auto": (TEXTS[2:], VoiceSpec("aiden", "auto"), Layout.NON_STREAMING),
    "dialect_chinese": (TEXTS[:1], VoiceSpec("eric", "chinese"), Layout.STREAMING),
    "dialect_auto": (TEXTS[1:2], VoiceSpec("dylan", "auto"), Layout.NON_STREAMING),
    "batch_of_three": (TEXTS, VoiceSpec("serena", "english"), Layout.NON_STREAMING),
    "batch_of_three_streaming": (TEXTS, VoiceSpec("sohee", "korean"), Layout.STREAMING),
}


@pytest.mark.parametrize("case", list(CUSTOM_VOICE_CASES))
def test_custom_voice_greedy_parity(case, ours, theirs):
    texts, voice, layout = CUSTOM_VOICE_CASES[case]
    codes, wavs = _official_run(theirs, "generate_custom_voice", text=texts, speaker=voice.speaker,
                                language=voice.language, instruct=voice.instruct,
                                non_streaming_mode=layout is Layout.NON_STREAMING)
    _assert_same(codes, wavs, _ours_run(ours, texts, voice, layout))


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_voice_design_greedy_parity(layout, official, tiny_voice_design_checkpoint):
    theirs = _load_official(official, tiny_voice_design_checkpoint)
    ours = Synthesizer(tiny_voice_design_checkpoint)
    voice = VoiceSpec(None, "english", "A deep, gravelly old man's voice, speaking slowly.")
    codes, wavs = _official_run(theirs, "generate_voice_design", text=TEXTS[:2], instruct=voice.instruct,
                                language=voice.language, non_streaming_mode=layout is Layout.NON_STREAMING)
    _assert_same(codes, wavs, _ours_run(ours, TEXTS[:2], voice, layout))


def test_parity_check_fails_when_one_weight_is_perturbed(tiny_checkpoint, theirs):
    perturbed = Synthesizer(tiny_checkpoint)
    w = perturbed.model.talker.model.layers[0].self_attn.o_proj.weight
    with torch.no_grad():
        w.add_(0.5 * torch.randn(w.shape, generator=torch.Generator().manual_seed(0)))
    texts, voice, layout = CUSTOM_VOICE_CASES["non_streaming"]
    codes, wavs = _official_run(theirs, "generate_custom_voice", text=texts, speaker=voice.speaker,
                                language=voice.language, non_streaming_mode=True)
    with pytest.raises(AssertionError):
        _assert_same(codes, wavs, _ours_run(perturbed, texts, voice, layout))


@pytest.fixture(scope="module")
def tiny_06b_checkpoint(tmp_path_factory):
    from tts_engine.checkpoint import make_checkpoint

    return make_checkpoint("tiny-0.6b", tmp_path_factory.mktemp("tiny-0.6b-customvoice"), seed=5)


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_06b_layout_custom_voice_greedy_parity(layout, official, tiny_06b_checkpoint):
    """The 0.6B layout: no talker -> code predictor projection, and instructions dropped by both."""
    theirs = _load_official(official, tiny_06b_checkpoint)
    ours = Synthesizer(tiny_06b_checkpoint)
    assert not ours.cfg.supports_instruct
    voice = VoiceSpec("aiden", "english", "Speak slowly.")
    codes, wavs = _official_run(theirs, "generate_custom_voice", text=TEXTS[:2], speaker=voice.speaker,
                                language=voice.language, instruct=voice.instruct,
                                non_streaming_mode=layout is Layout.NON_STREAMING)
    _assert_same(codes, wavs, _ours_run(ours, TEXTS[:2], voice, layout))
