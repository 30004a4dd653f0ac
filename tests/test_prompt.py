"""Prompt layout from config ids, without a model."""

from __future__ import annotations

import pytest

from tts_engine.config import CONFIG_DIR, ModelConfig
from tts_engine.prompt import Layout, VoiceSpec, build_prompt, resolve_voice

CFG = ModelConfig.from_file(CONFIG_DIR / "1.7b-customvoice.config.json")
T = CFG.talker
ROLE = [151644, 77091, 198]
TAIL = [151645, 198, 151644, 77091, 198]
CONTENT = [1001, 1002, 1003, 1004]
PAD, BOS, EOS = CFG.tts_pad_token_id, CFG.tts_bos_token_id, CFG.tts_eos_token_id


def _prompt(voice, layout, instruct_ids=None, cfg=CFG):
    return build_prompt(cfg, ROLE + CONTENT + TAIL, voice, layout, instruct_ids)


def test_non_streaming_layout():
    p = _prompt(VoiceSpec("ryan", "english"), Layout.NON_STREAMING)
    ctrl = [T.codec_think_id, T.codec_think_bos_id, T.codec_language_id["english"], T.codec_think_eos_id,
            T.spk_id["ryan"], T.codec_pad_id]
    assert list(p.text_ids) == [*ROLE, PAD, PAD, PAD, PAD, PAD, BOS, *CONTENT, EOS, PAD]
    assert list(p.codec_ids) == [None] * 3 + ctrl + [T.codec_pad_id] * 5 + [T.codec_bos_id]
    assert p.trailing_text_ids == ()
    assert p.step_text_id(0) == p.step_text_id(100) == PAD


def test_streaming_layout_feeds_one_text_token_per_frame():
    p = _prompt(VoiceSpec("ryan", "english"), Layout.STREAMING)
    assert p.text_ids[-1] == CONTENT[0] and p.codec_ids[-1] == T.codec_bos_id
    assert [p.step_text_id(k) for k in range(6)] == [*CONTENT[1:], EOS, PAD, PAD]


def test_auto_language_uses_nothink_control():
    p = _prompt(VoiceSpec("ryan", "auto"), Layout.STREAMING)
    assert list(p.codec_ids[3:7]) == [T.codec_nothink_id, T.codec_think_bos_id, T.codec_think_eos_id,
                                      T.spk_id["ryan"]]


@pytest.mark.parametrize(("speaker", "language", "expected"), [
    ("eric", "chinese", "sichuan_dialect"), ("eric", "auto", "sichuan_dialect"),
    ("dylan", "chinese", "beijing_dialect"), ("dylan", "english", "english"), ("ryan", "chinese", "chinese"),
])
def test_dialect_speakers_switch_language(speaker, language, expected):
    assert resolve_voice(CFG, VoiceSpec(speaker, language))[1] == T.codec_language_id[expected]


def test_instruct_rows_come_first_and_are_text_only():
    instruct = [151644, 872, 198, 5, 6, 151645, 198]
    p = _prompt(VoiceSpec("vivian", "english", "calm"), Layout.NON_STREAMING, instruct)
    assert list(p.text_ids[:7]) == instruct and p.codec_ids[:7] == (None,) * 7


def test_0_6b_drops_instruct():
    cfg = ModelConfig.from_file(CONFIG_DIR / "0.6b-customvoice.config.json")
    with_instruct = _prompt(VoiceSpec("vivian", "english", "calm"), Layout.NON_STREAMING, [151644, 5], cfg)
    plain = _prompt(VoiceSpec("vivian", "english"), Layout.NON_STREAMING, None, cfg)
    assert with_instruct == plain


@pytest.mark.parametrize(("voice", "message"), [
    (VoiceSpec("bob", "english"), "unknown voice 'bob'"),
    (VoiceSpec("ryan", "klingon"), "unknown language 'klingon'"),
    (VoiceSpec(None, "english"), "needs a voice"),
    (VoiceSpec("ryan", "sichuan_dialect"), "unknown language"),
])
def test_bad_voice_or_language_is_a_clear_error(voice, message):
    with pytest.raises(ValueError, match=message):
        _prompt(voice, Layout.NON_STREAMING)


def test_empty_text_is_rejected():
    with pytest.raises(ValueError, match="empty"):
        build_prompt(CFG, ROLE + TAIL, VoiceSpec("ryan"), Layout.STREAMING)


def test_voice_names_are_case_insensitive():
    assert resolve_voice(CFG, VoiceSpec("Ryan", "English"))[0] == T.spk_id["ryan"]
