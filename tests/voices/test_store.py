"""Cloned voices kept by id: lookups, and a store directory that survives a restart."""

from __future__ import annotations

import pytest
import torch

from tts_engine.prompt import VoiceSpec
from tts_engine.voices.clone import ClonePrompt
from tts_engine.voices.store import VoiceStore, is_voice_id


def _prompts():
    g = torch.Generator().manual_seed(0)
    return (ClonePrompt(torch.randn(64, generator=g)),
            ClonePrompt(torch.randn(64, generator=g), torch.randint(0, 2048, (9, 16), generator=g), (5, 6, 7), "hi"))


def test_voices_survive_a_restart_of_the_store(tmp_path):
    first = VoiceStore(tmp_path)
    made = [first.add(p, name=f"v{i}", seconds=3.0 + i) for i, p in enumerate(_prompts())]
    again = VoiceStore(tmp_path)
    assert [v.describe() for v in again.list()] == [v.describe() for v in made]
    for v in made:
        loaded = again.get(v.voice_id).prompt
        assert torch.equal(loaded.speaker_embedding, v.prompt.speaker_embedding)
        assert loaded.ref_text_ids == v.prompt.ref_text_ids and loaded.ref_text == v.prompt.ref_text
        assert (loaded.ref_codes is None) == (v.prompt.ref_codes is None)
        if loaded.ref_codes is not None:
            assert torch.equal(loaded.ref_codes, v.prompt.ref_codes)
    assert again.delete(made[0].voice_id) and not again.delete(made[0].voice_id)
    assert [v.voice_id for v in VoiceStore(tmp_path).list()] == [made[1].voice_id]


def test_attach_gives_stored_ids_their_prompt_and_leaves_other_voices_alone():
    store = VoiceStore()
    voice = store.add(_prompts()[0], seconds=2.0)
    assert is_voice_id(voice.voice_id)
    attached = store.attach(VoiceSpec(voice.voice_id, "english"))
    assert attached.cloned is voice.prompt and attached.language == "english"
    for other in (VoiceSpec("ryan"), VoiceSpec(None), VoiceSpec("voice_0000000000000000")):
        assert store.attach(other).cloned is None


def test_the_store_has_a_size_limit():
    store = VoiceStore(max_voices=1)
    store.add(_prompts()[0], seconds=1.0)
    with pytest.raises(OverflowError, match="at most 1 voices"):
        store.add(_prompts()[0], seconds=1.0)


def test_reference_files_are_read_and_checked(tmp_path, reference_wav_bytes):
    from tts_engine.voices.audio import ReferenceAudioError, load_reference_file

    good = tmp_path / "ref.wav"
    good.write_bytes(reference_wav_bytes)
    wav = load_reference_file(good)
    assert wav.dtype == "float32" and 1.0 < len(wav) / 24000 < 10
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_reference_file(tmp_path / "missing.wav")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    with pytest.raises(ReferenceAudioError, match=r"bad\.wav: the reference audio is not in a readable format"):
        load_reference_file(bad)
