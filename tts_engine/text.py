"""Qwen2 byte-level BPE text tokenizer, built from a checkpoint's own tokenizer files.

Qwen3-TTS checkpoints ship `vocab.json`, `merges.txt` and `tokenizer_config.json` but no
`tokenizer.json`; the reference loads them with transformers' `Qwen2TokenizerFast`, which converts
the slow `Qwen2Tokenizer` into a `tokenizers` pipeline. This module builds the same pipeline
directly with `tokenizers` (no transformers import):

    text -> split out added tokens (leftmost-longest, before normalisation)
         -> NFC -> Qwen2 split regex (isolated) -> ByteLevel(no prefix space, no regex)
         -> BPE over each pre-token -> ids

Added tokens get exactly the ids that `added_tokens_decoder` declares. transformers instead
appends them one after another at `len(vocab)`, which gives the same ids for every real
checkpoint (dense `vocab.json` 0..151642, added tokens 151643.. in order); we place them
explicitly so that a sparse vocabulary (the synthetic one in `checkpoint_text.py`) cannot shift
them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

VOCAB_FILE = "vocab.json"
MERGES_FILE = "merges.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# Qwen2's pre-tokenizer split pattern (the slow Qwen2Tokenizer's PRETOKENIZE_REGEX).
QWEN2_SPLIT_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Named special-token slots of a tokenizer_config; Qwen2Tokenizer's defaults when a key is absent.
_NAMED_SPECIAL_DEFAULTS = {
    "bos_token": None,
    "eos_token": "<|endoftext|>",
    "unk_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>",
}


def qwen2_split() -> pre_tokenizers.PreTokenizer:
    """The regex stage alone; its offsets are character offsets into the (normalised) text."""
    return pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False)


def qwen2_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Split regex, then byte-to-unicode mapping (GPT-2 `bytes_to_unicode`) without a prefix space."""
    return pre_tokenizers.Sequence(
        [qwen2_split(), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )


@dataclass(frozen=True)
class AddedTokenSpec:
    """One entry of `added_tokens_decoder`: matched in raw text before BPE, never split."""

    id: int
    content: str
    special: bool = True
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


class TextTokenizer:
    """Encode/decode text exactly like transformers' `Qwen2TokenizerFast` on the same files."""

    def __init__(
        self,
        vocab: dict[str, int],
        merges: list[tuple[str, str]],
        added_tokens: Iterable[AddedTokenSpec],
        split_special_tokens: bool = False,
    ):
        added = sorted(added_tokens, key=lambda t: t.id)
        vocab = dict(vocab)
        id_to_token = {i: t for t, i in vocab.items()}
        if len(id_to_token) != len(vocab):
            raise ValueError(f"{VOCAB_FILE} maps several tokens to one id")
        for spec in added:
            # Place every added token in the model vocabulary at its declared id, so the
            # added-vocabulary layer reuses that id instead of appending at len(vocab).
            known = vocab.get(spec.content)
            holder = id_to_token.get(spec.id)
            if known is not None and known != spec.id:
                raise ValueError(
                    f"added token {spec.content!r} has id {spec.id} in {TOKENIZER_CONFIG_FILE} "
                    f"but {known} in {VOCAB_FILE}"
                )
            if holder is not None and holder != spec.content:
                raise ValueError(
                    f"id {spec.id} of added token {spec.content!r} is already {holder!r} in {VOCAB_FILE}"
                )
            vocab[spec.content] = spec.id
            id_to_token[spec.id] = spec.content
        try:
            model = BPE(
                vocab=vocab,
                merges=merges,
                dropout=None,
                unk_token=None,
                continuing_subword_prefix="",
                end_of_word_suffix="",
                fuse_unk=False,
                byte_fallback=False,
            )
        except Exception as exc:  # tokenizers raises a bare Exception for inconsistent merges
            raise ValueError(f"{MERGES_FILE} does not fit {VOCAB_FILE}: {exc}") from exc
        tok = Tokenizer(model)
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = qwen2_pre_tokenizer()
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        for spec in added:
            token = AddedToken(
                spec.content,
                single_word=spec.single_word,
                lstrip=spec.lstrip,
                rstrip=spec.rstrip,
                normalized=spec.normalized,
                special=spec.special,
            )
            if spec.special:
                tok.add_special_tokens([token])
            else:
                tok.add_tokens([token])
            if tok.token_to_id(spec.content) != spec.id:
                raise ValueError(f"added token {spec.content!r} did not get its declared id {spec.id}")
        tok.encode_special_tokens = split_special_tokens
        self._tok = tok
        self._vocab_size = max(id_to_token) + 1 if id_to_token else 0
        self.added_tokens: tuple[AddedTokenSpec, ...] = tuple(added)
        self.split_special_tokens = split_special_tokens

    @classmethod
    def from_dir(cls, path: str | Path) -> TextTokenizer:
        """Load `vocab.json`, `merges.txt` and `tokenizer_config.json` from a checkpoint dir."""
        root = Path(path)
        if not root.is_dir():
            raise FileNotFoundError(f"tokenizer directory not found: {root}")
        for name in (VOCAB_FILE, MERGES_FILE, TOKENIZER_CONFIG_FILE):
            if not (root / name).is_file():
                raise FileNotFoundError(f"missing tokenizer file {name} in {root}")
        vocab = _read_json(root / VOCAB_FILE)
        if not isinstance(vocab, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in vocab.items()
        ):
            raise ValueError(f"{root / VOCAB_FILE} must map token strings to non-negative integer ids")
        config = _read_json(root / TOKENIZER_CONFIG_FILE)
        if not isinstance(config, dict):
            raise ValueError(f"{root / TOKENIZER_CONFIG_FILE} must hold a JSON object")
        merges = read_merges(root / MERGES_FILE)
        added = _added_tokens_from_config(config, vocab, root / TOKENIZER_CONFIG_FILE)
        return cls(vocab, merges, added, split_special_tokens=bool(config.get("split_special_tokens", False)))

    @property
    def vocab_size(self) -> int:
        """One past the largest id (ids may be sparse)."""
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; added tokens written in the text (e.g. `<|im_start|>`) become their ids."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`; invalid UTF-8 byte sequences become U+FFFD (errors="replace")."""
        ids = [int(i) for i in ids]
        for i in ids:
            if self._tok.id_to_token(i) is None:
                raise ValueError(f"token id {i} is not in the vocabulary")
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int:
        """Id of one vocabulary entry, e.g. `token_id("<tts_pad>") == 151671`."""
        i = self._tok.token_to_id(token)
        if i is None:
            raise ValueError(f"token {token!r} is not in the vocabulary")
        return i

    def id_to_token(self, token_id: int) -> str:
        token = self._tok.id_to_token(int(token_id))
        if token is None:
            raise ValueError(f"token id {token_id} is not in the vocabulary")
        return token

    def pre_token_spans(self, normalized_text: str) -> list[tuple[int, int]]:
        """Character spans of the pre-tokens of already-normalised text without added tokens."""
        return [span for _, span in _SPLIT.pre_tokenize_str(normalized_text)]


_SPLIT = qwen2_split()


def read_merges(path: Path) -> list[tuple[str, str]]:
    """Parse a GPT-2 style merges file (optional `#version` header, one `left right` per line)."""
    merges: list[tuple[str, str]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line or (lineno == 1 and line.startswith("#version")):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}:{lineno}: a merge must be two tokens, got {line!r}")
            merges.append((parts[0], parts[1]))
    return merges


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc


def _added_tokens_from_config(config: dict, vocab: dict[str, int], path: Path) -> list[AddedTokenSpec]:
    table = config.get("added_tokens_decoder", {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: added_tokens_decoder must be an object keyed by id")
    named = _named_special_tokens(config)
    specs = []
    for key, entry in table.items():
        if not (isinstance(key, str) and key.isdigit()) or not isinstance(entry, dict) or "content" not in entry:
            raise ValueError(f"{path}: bad added_tokens_decoder entry {key!r}: {entry!r}")
        content = entry["content"]
        specs.append(
            AddedTokenSpec(
                id=int(key),
                content=content,
                # transformers also treats every named special token as special.
                special=bool(entry.get("special", False)) or content in named,
                normalized=bool(entry.get("normalized", not entry.get("special", False))),
                lstrip=bool(entry.get("lstrip", False)),
                rstrip=bool(entry.get("rstrip", False)),
                single_word=bool(entry.get("single_word", False)),
            )
        )
    declared = {s.content for s in specs}
    # transformers would append a named special token missing from both tables at a fresh id;
    # no real checkpoint does that and the model could not know such an id, so refuse it.
    for content in sorted(named - declared - set(vocab)):
        raise ValueError(f"{path}: special token {content!r} is not in added_tokens_decoder")
    return specs


def _named_special_tokens(config: dict) -> set[str]:
    names: set[str] = set()
    for key, default in _NAMED_SPECIAL_DEFAULTS.items():
        value = config.get(key, default)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            names.add(value)
    for value in config.get("additional_special_tokens") or []:
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            names.add(value)
    return names
