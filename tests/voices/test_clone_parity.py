"""Voice cloning on a Base checkpoint against the official qwen-tts, on random weights.

The speaker encoder (log-mel + ECAPA-TDNN) and the codec encoder (Mimi) are ours; each output must
equal the official one, and a whole cloned utterance (x-vector and in-context modes, both layouts)
must give the official greedy codes and PCM. Reference audio is real speech made by espeak-ng.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import numpy as np
import pytest
import torch

from tests.test_parity import FRAMES, _assert_same, _load_official, _official_run, _ours_run
from tests.voices.conftest import REFERENCE_TEXT
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.reference import generate_codes
from tts_engine.sampling import SamplingParams
from tts_engine.synthesizer import Synthesizer
from tts_engine.voices.encoder import VoiceEncoder
from tts_engine.voices.mel import mel_filterbank

TEXTS = ["Glue the sheet to the dark blue background.", "Hi!"]


@pytest.fixture(scope="module")
def theirs(official, tiny_base_checkpoint):
    from tests.official import use_transformers_mel_filterbank

    use_transformers_mel_filterbank()
    return _load_official(official, tiny_base_checkpoint)


@pytest.fixture(scope="module")
def ours(tiny_base_checkpoint):
    return Synthesizer(tiny_base_checkpoint)


def test_mel_filterbank_equals_an_independent_slaney_implementation():
    from transformers.audio_utils import mel_filter_bank

    theirs = mel_filter_bank(num_frequency_bins=513, num_mel_filters=128, min_frequency=0, max_frequency=12000,
                             sampling_rate=24000, norm="slaney", mel_scale="slaney").T
    np.testing.assert_allclose(mel_filterbank(), theirs, rtol=0, atol=1e-7)


def test_speaker_embedding_equals_official(theirs, ours, reference_24k):
    official = theirs.model.extract_speaker_embedding(reference_24k, 24000)
    mine = ours.clone_voice(reference_24k).speaker_embedding
    assert mine.shape == official.shape == (ours.cfg.talker.hidden_size,)
    torch.testing.assert_close(mine, official.float(), rtol=1e-5, atol=1e-5)
    assert official.abs().mean() > 0.1, "a vanishing embedding proves nothing"


def test_speaker_embedding_check_fails_when_a_weight_is_perturbed(theirs, tiny_base_checkpoint, reference_24k):
    encoder = VoiceEncoder.from_checkpoint(tiny_base_checkpoint)
    with torch.no_grad():
        encoder.speaker_encoder.blocks[0].conv.weight.mul_(1.05)
    official = theirs.model.extract_speaker_embedding(reference_24k, 24000)
    assert not torch.allclose(encoder.speaker_embedding(reference_24k), official.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seconds", [None, 1.3, 12.0])
def test_reference_codes_equal_official(theirs, tiny_base_checkpoint, reference_24k, seconds):
    """None: the espeak sentence; 1.3 s: a partial last frame; 12 s: longer than the config's 250-frame
    window at 25 Hz (the official encoder attends to every earlier frame)."""
    wav = reference_24k
    if seconds is not None:
        reps = int(np.ceil(seconds * 24000 / len(wav)))
        wav = np.tile(wav, reps)[: int(seconds * 24000)]
    official = theirs.model.speech_tokenizer.encode(wav, sr=24000).audio_codes[0]
    mine = VoiceEncoder.from_checkpoint(tiny_base_checkpoint).codec_encoder.encode(torch.from_numpy(wav))
    assert mine.shape == official.shape == (-(-len(wav) // 1920), 16)
    assert torch.equal(mine, official.cpu())


@contextlib.contextmanager
def _official_codes_only(theirs):
    """The codec decoder costs most of a CPU run and is covered by the CustomVoice parity tests and
    by `test_in_context_pcm_equals_official`: skip it on the official side here."""
    tokenizer = theirs.model.speech_tokenizer
    real = tokenizer.decode
    tokenizer.decode = lambda items: ([np.zeros(len(i["audio_codes"]) * 1920, np.float32) for i in items], 24000)
    try:
        yield
    finally:
        tokenizer.decode = real


def _assert_same_codes(theirs, ours, texts, voice, layout, **official_kwargs):
    with _official_codes_only(theirs):
        theirs.captured.clear()
        theirs.generate_voice_clone(text=texts, non_streaming_mode=layout is Layout.NON_STREAMING, do_sample=False,
                                    subtalker_dosample=False, max_new_tokens=FRAMES + 1, **official_kwargs)
        their_codes = theirs.captured[-1]
    greedy = SamplingParams.greedy()
    items = [replace(ours.prepare(t, voice, layout=layout, params=greedy, max_frames=FRAMES), forced_frames=None)
             for t in texts]
    our_codes = generate_codes(ours.model, items)
    assert len(their_codes) == len(our_codes) == len(texts)
    for a, b in zip(their_codes, our_codes, strict=True):
        assert a.shape == b.shape == (FRAMES, 16)
        assert torch.equal(a, b)
        assert len(set(b[:, 0].tolist())) > 1, "degenerate codes prove nothing"


CLONE_CASES = {
    "x_vector_non_streaming": (True, Layout.NON_STREAMING, TEXTS[:1]),
    "x_vector_streaming": (True, Layout.STREAMING, TEXTS[:1]),
    "in_context_streaming": (False, Layout.STREAMING, TEXTS[:1]),
    "in_context_batch_of_two": (False, Layout.NON_STREAMING, TEXTS),
}


@pytest.mark.parametrize("case", list(CLONE_CASES))
def test_voice_clone_greedy_parity(case, theirs, ours, reference_24k):
    x_vector_only, layout, texts = CLONE_CASES[case]
    clone = ours.clone_voice(reference_24k, None if x_vector_only else REFERENCE_TEXT)
    assert clone.in_context is not x_vector_only
    _assert_same_codes(theirs, ours, texts, VoiceSpec("cloned", "english", cloned=clone), layout,
                       language="english", ref_audio=(reference_24k, 24000), ref_text=REFERENCE_TEXT,
                       x_vector_only_mode=x_vector_only)


@pytest.mark.parametrize("layout", [Layout.NON_STREAMING, Layout.STREAMING])
def test_in_context_with_text_longer_than_the_reference(theirs, ours, reference_24k, layout):
    """A 1 s reference (13 frames) under a long transcript + text: in the streaming layout the text
    track outruns the codec track and the rest of the text is fed one token per frame."""
    short = reference_24k[:24000]
    long_text = "The box was thrown beside the parked truck, and the boy was there when the sun rose."
    clone = ours.clone_voice(short, REFERENCE_TEXT)
    assert clone.ref_codes.shape[0] + 1 < len(clone.ref_text_ids) + len(long_text.split())
    _assert_same_codes(theirs, ours, [long_text], VoiceSpec("cloned", "auto", cloned=clone), layout,
                       language="auto", ref_audio=(short, 24000), ref_text=REFERENCE_TEXT)


def test_in_context_pcm_equals_official(theirs, ours, reference_24k):
    """The reference codes are decoded in front of the new ones and cut off again: same samples."""
    short = reference_24k[:31200]  # 1.3 s: a partial last reference frame
    codes, wavs = _official_run(theirs, "generate_voice_clone", text=TEXTS[1:], language="english",
                                ref_audio=(short, 24000), ref_text=REFERENCE_TEXT, non_streaming_mode=True)
    clone = ours.clone_voice(short, REFERENCE_TEXT)
    _assert_same(codes, wavs, _ours_run(ours, TEXTS[1:], VoiceSpec("cloned", "english", cloned=clone),
                                        Layout.NON_STREAMING))


@pytest.mark.parametrize("x_vector_only", [True, False])
def test_06b_layout_base_clone_greedy_parity(official, tmp_path_factory, reference_24k, x_vector_only):
    from tests.official import use_transformers_mel_filterbank
    from tts_engine.checkpoint import make_checkpoint

    path = make_checkpoint("tiny-0.6b", tmp_path_factory.mktemp("tiny-0.6b-base"), seed=6, variant="base")
    use_transformers_mel_filterbank()
    theirs, ours = _load_official(official, path), Synthesizer(path)
    clone = ours.clone_voice(reference_24k, None if x_vector_only else REFERENCE_TEXT)
    torch.testing.assert_close(clone.speaker_embedding,
                               theirs.model.extract_speaker_embedding(reference_24k, 24000).float(),
                               rtol=1e-5, atol=1e-5)
    _assert_same_codes(theirs, ours, TEXTS, VoiceSpec("cloned", "auto", cloned=clone), Layout.STREAMING,
                       language="auto", ref_audio=(reference_24k, 24000), ref_text=REFERENCE_TEXT,
                       x_vector_only_mode=x_vector_only)
