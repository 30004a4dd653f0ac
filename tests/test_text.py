"""Text tokenizer: equal to transformers' Qwen2 tokenizers, synthetic vocab layout, streaming."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tts_engine.checkpoint_text import (
    ADDED_TOKENS,
    ASSISTANT_ID,
    TEXT_VOCAB_SIZE,
    bytes_to_unicode,
    write_synthetic_tokenizer,
)
from tts_engine.text import TextTokenizer
from tts_engine.text_stream import StreamingTokenizer

CORPUS = (Path(__file__).parents[1] / "tts_engine" / "data" / "harvard-sentences.txt").read_text("utf-8")
SENTENCES = [line for line in CORPUS.splitlines() if line.strip()]

IM_START, IM_END, ASSISTANT, NEWLINE = 151644, 151645, ASSISTANT_ID, 198

EDGE_CASES = [
    "",
    " ",
    "   ",
    "\n",
    "\n\n\n",
    " leading space",
    "trailing space ",
    "  both sides  ",
    "\nleading newline",
    "trailing newline\n",
    "windows\r\nline\r\n",
    "tabs\tand\t\tmore\t",
    " \t\n \n  \n",
    "0",
    "12345 678",
    "3.14159, 1,000,000 and 2024-01-31",
    "x=1+2*3/4",
    "!!! ... ?!?! --- ***",
    "(a) [b] {c} <d> 'e' \"f\"",
    "it's I'm we're they've I'll he'd DON'T You'RE",
    "'s 't ' s",
    "Cafe\u0301 au lai\u0308t",  # combining marks that NFC composes
    "e\u0301\u0323 a\u0346\u0323 =\u0338 <\u0338",  # canonical reordering + composition
    "\u212b \u2126 \u1100\u1161\u11a8",  # singletons and Hangul jamo NFC rewrites
    "한국어 텍스트입니다.",
    "中文测试，你好。日本語のテキスト、カタカナ。",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧 flag 🇫🇷",
    "control \x00\x01\x07\x1b[0m\x7f chars",
    "zero\u200bwidth\u200d\ufeffjoiners",
    "\u00a0nbsp\u3000ideographic\u2028separator",
    "ﬁ ligature ǅ digraph",
    "mixed 123abc abc123 a1b2c3",
    "a" * 10_000,
    "<|im_start|>user\nhi<|im_end|>\n",
    "text<|im_end|>more<|endoftext|>",
    "<think>\n\n</think>\n\n<tool_call>{}</tool_call>",
    "<tts_pad><tts_text_bos><tts_text_eod><tts_text_bos_single>",
    "<|im_start <|IM_START|> <|im_start|",
    "<<|im_end|>>",
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text-tokenizer")
    write_synthetic_tokenizer(path)
    return path


@pytest.fixture(scope="module")
def ours(tokenizer_dir) -> TextTokenizer:
    return TextTokenizer.from_dir(tokenizer_dir)


@pytest.fixture(scope="module")
def hf_fast(tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    assert type(tok).__name__ == "Qwen2TokenizerFast"
    return tok


@pytest.fixture(scope="module")
def hf_slow(tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), use_fast=False)
    assert type(tok).__name__ == "Qwen2Tokenizer"
    return tok


def chat(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


# --- synthetic vocabulary layout ---------------------------------------------------------------


def test_added_tokens_get_real_ids_in_ours_and_transformers(ours, hf_fast, hf_slow):
    for token_id, content, _ in ADDED_TOKENS:
        assert ours.token_id(content) == token_id
        assert hf_fast.convert_tokens_to_ids(content) == token_id
        assert hf_slow.convert_tokens_to_ids(content) == token_id
        assert ours.encode(content) == hf_fast.encode(content) == [token_id]
    assert ours.token_id("<tts_pad>") == 151671
    assert ours.token_id("<tts_text_bos>") == 151672
    assert ours.token_id("<tts_text_eod>") == 151673


def test_vocab_has_byte_symbols_first_and_ids_below_embedding_size(tokenizer_dir, ours):
    vocab = json.loads((tokenizer_dir / "vocab.json").read_text("utf-8"))
    assert [vocab[ch] for ch in bytes_to_unicode().values()] == list(range(256))
    assert vocab["Ċ"] == NEWLINE and vocab["Ġ"] == 220 and vocab["assistant"] == ASSISTANT
    assert max(vocab.values()) < TEXT_VOCAB_SIZE
    assert len(set(vocab.values())) == len(vocab)
    assert ours.vocab_size <= TEXT_VOCAB_SIZE
    assert ours.encode("assistant") == [ASSISTANT]
    assert ours.encode("<|im_start|>assistant\n") == [IM_START, ASSISTANT, NEWLINE]


def test_synthetic_tokenizer_is_deterministic_and_seed_only_reorders_ties(tmp_path, tokenizer_dir):
    write_synthetic_tokenizer(tmp_path / "again")
    write_synthetic_tokenizer(tmp_path / "seed1", seed=1)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tokenizer_dir / name).read_bytes()
    assert (tmp_path / "seed1" / "merges.txt").read_bytes() != (tokenizer_dir / "merges.txt").read_bytes()
    other = TextTokenizer.from_dir(tmp_path / "seed1")
    assert other.encode(chat("Hi there."))[:3] == [IM_START, ASSISTANT, NEWLINE]


def test_tokenizer_config_has_the_qwen_fields(tokenizer_dir):
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text("utf-8"))
    assert config["tokenizer_class"] == "Qwen2Tokenizer"
    assert config["bos_token"] is None and config["errors"] == "replace"
    assert config["split_special_tokens"] is False and config["add_prefix_space"] is False
    assert config["clean_up_tokenization_spaces"] is False
    ids = sorted(int(i) for i in config["added_tokens_decoder"])
    assert ids == list(range(151643, 151643 + len(ids)))


# --- equality with transformers ----------------------------------------------------------------


def test_encode_matches_transformers_on_every_corpus_sentence(ours, hf_fast, hf_slow):
    expected = hf_fast(SENTENCES)["input_ids"]
    assert ours.encode_many(SENTENCES) == expected
    assert [ours.encode(s) for s in SENTENCES] == expected
    assert [hf_slow.encode(s) for s in SENTENCES] == expected
    assert ours.encode(CORPUS) == hf_fast.encode(CORPUS) == hf_slow.encode(CORPUS)


def test_chat_template_matches_transformers_and_has_the_prompt_layout(ours, hf_fast, hf_slow):
    texts = SENTENCES[::7] + [t for t in EDGE_CASES if len(t) < 1000]
    for text in texts:
        ids = ours.encode(chat(text))
        assert ids == hf_fast.encode(chat(text)) == hf_slow.encode(chat(text)), text
        assert ids[:3] == [IM_START, ASSISTANT, NEWLINE]
        assert ids[-5:] == [IM_END, NEWLINE, IM_START, ASSISTANT, NEWLINE]
        if "<" not in text:
            assert ids[3:-5] == ours.encode(text)


@pytest.mark.parametrize("text", EDGE_CASES, ids=lambda t: repr(t[:24]))
def test_edge_cases_match_transformers_fast_and_slow(ours, hf_fast, hf_slow, text):
    ids = ours.encode(text)
    assert ids == hf_fast.encode(text)
    assert ids == hf_slow.encode(text)
    assert ours.decode(ids) == hf_fast.decode(ids)
    assert ours.decode(ids, skip_special_tokens=True) == hf_fast.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("text", EDGE_CASES + SENTENCES[:50], ids=lambda t: repr(t[:24]))
def test_decode_of_encode_is_the_nfc_text(ours, text):
    assert ours.decode(ours.encode(text)) == unicodedata.normalize("NFC", text)


def test_decode_of_a_partial_utf8_sequence_uses_replacement_char(ours, hf_fast):
    ids = ours.encode("😀")
    assert len(ids) == 4
    assert ours.decode(ids[:2]) == hf_fast.decode(ids[:2]) == "\ufffd"


# Characters that stress every pipeline stage: specials, NFC, the split regex, byte fallback.
ALPHABET = st.sampled_from(
    [
        *"abcXYZ019 '\n\r\t.,!?-<>|=_/",
        *["\u0301", "\u0323", "\u0346", "\u0338", "\u00a0", "\u3000", "é", "\u212b"],
        *["\u1100", "\u1161", "\u11a8", "가", "中", "文", "😀", "\u200d", "\x00", "\x1b"],
    ]
)
FRAGMENTS = st.sampled_from(
    ["<|im_start|>", "<|im_end|>", "<|im_", "end|>", "<tts_pad>", "<think>", "</think>", "<|", "|>",
     "assistant", "'re", "'ll", " \n", "\n\n", "  ", "The", " the", "ing"]
)
PIECE = st.one_of(st.text(ALPHABET, max_size=6), FRAGMENTS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(PIECE, max_size=10))
def test_encode_matches_transformers_on_generated_text(ours, hf_fast, hf_slow, pieces):
    text = "".join(pieces)
    ids = ours.encode(text)
    assert ids == hf_fast.encode(text)
    if "\u0338" not in text:  # see the next test
        assert ids == hf_slow.encode(text)


def test_slow_transformers_tokenizer_composes_across_special_tokens_unlike_fast(ours, hf_fast, hf_slow):
    # The slow tokenizer applies NFC before splitting out added tokens, so ">" + U+0338 becomes
    # "≯" and `<|im_end|>` is no longer found; the fast one (used by the reference through
    # AutoProcessor) splits first. We follow the fast one.
    text = "<|im_end|>\u0338"
    assert ours.encode(text) == hf_fast.encode(text) == [IM_END, *ours.encode("\u0338")]
    assert hf_slow.encode(text) != hf_fast.encode(text)


# --- streaming -------------------------------------------------------------------------------


def stream(tokenizer: TextTokenizer, pieces: list[str]) -> list[int]:
    streamer = StreamingTokenizer(tokenizer)
    ids: list[int] = []
    for piece in pieces:
        ids += streamer.push(piece)
    return ids + streamer.finish()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(PIECE, max_size=12))
def test_streaming_any_split_gives_the_same_ids_as_encode(ours, pieces):
    text = "".join(pieces)
    expected = ours.encode(text)
    assert stream(ours, pieces) == expected
    assert stream(ours, list(text)) == expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SENTENCES), st.lists(st.integers(0, 80), max_size=8))
def test_streaming_chat_prompt_in_arbitrary_pieces(ours, sentence, cuts):
    text = chat(sentence)
    bounds = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)])]
    assert stream(ours, pieces) == ours.encode(text)


def test_streaming_commits_each_word_once_the_next_one_starts(ours):
    streamer = StreamingTokenizer(ours)
    assert streamer.push("<|im_start|>assistant\n") == [IM_START, ASSISTANT]
    for sentence in SENTENCES[:40]:
        words = sentence.split(" ")
        pieces = [words[0]] + [" " + w for w in words[1:]]
        for i, piece in enumerate(pieces):
            streamer.push(piece)
            # At most the last two pieces (the open pre-token and the one before it) wait.
            assert len(streamer.pending_text) <= len("".join(pieces[max(0, i - 1) : i + 1])) + 1
        streamer.push(" ")


def test_streaming_holds_partial_special_tokens(ours):
    streamer = StreamingTokenizer(ours)
    assert streamer.push("Hi.<|im") == ours.encode("Hi")
    assert streamer.pending_text == ".<|im"
    assert streamer.push("_end|>") == [*ours.encode("."), IM_END]
    assert streamer.finish() == []
    assert streamer.push("x") == [] and streamer.finish() == ours.encode("x")


# --- errors and boundaries -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vocab.json", "merges.txt", "tokenizer_config.json"])
def test_missing_tokenizer_file_is_named(tmp_path, tokenizer_dir, name):
    shutil.copytree(tokenizer_dir, tmp_path / "ckpt")
    (tmp_path / "ckpt" / name).unlink()
    with pytest.raises(FileNotFoundError, match=name.replace(".", r"\.")):
        TextTokenizer.from_dir(tmp_path / "ckpt")


def test_missing_directory_and_bad_files_raise_clear_errors(tmp_path, tokenizer_dir):
    with pytest.raises(FileNotFoundError, match="tokenizer directory"):
        TextTokenizer.from_dir(tmp_path / "nope")
    shutil.copytree(tokenizer_dir, tmp_path / "ckpt")
    with open(tmp_path / "ckpt" / "merges.txt", "a", encoding="utf-8") as f:
        f.write("a b c\n")
    with pytest.raises(ValueError, match=r"merges\.txt"):
        TextTokenizer.from_dir(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "merges.txt").write_text("#version: 0.2\nzz qq\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"merges\.txt"):
        TextTokenizer.from_dir(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "vocab.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab\.json"):
        TextTokenizer.from_dir(tmp_path / "ckpt")


def test_unknown_tokens_and_ids_raise_value_error(ours):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        ours.token_id("<|no_such_token|>")
    with pytest.raises(ValueError, match="not in the vocabulary"):
        ours.decode([100_000])


def test_engine_text_modules_do_not_import_transformers():
    code = (
        "import sys, tts_engine.text, tts_engine.text_stream, tts_engine.checkpoint_text\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])
