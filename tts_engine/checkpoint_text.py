"""Synthetic Qwen2-style tokenizer files for random-weight test checkpoints.

Real vocabularies cannot be downloaded here, so tests write a small one with the same layout:
- ids 0..255: the 256 byte-level symbols in GPT-2 `bytes_to_unicode` order (as in the real
  vocabulary, so "\\n" -> "Ċ" is 198 and " " -> "Ġ" is 220);
- then the results of BPE merges learned deterministically from `data/harvard-sentences.txt`
  (public-domain English sentences), in merge order;
- "assistant" at its real id 77091, with merges that build it as one token;
- every added token at its real id 151643.. (also written into vocab.json, see below).

The vocabulary is sparse. transformers' slow->fast conversion appends the entries of
`added_tokens_decoder` at `len(vocab)` unless the model vocabulary already holds them, so the
added tokens are also listed in `vocab.json` at their ids: then transformers (fast and slow) and
`TextTokenizer` all agree on the real ids.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import json
import unicodedata
from collections import Counter, defaultdict
from importlib import resources
from itertools import pairwise
from pathlib import Path

from tts_engine.text import MERGES_FILE, TOKENIZER_CONFIG_FILE, VOCAB_FILE, qwen2_pre_tokenizer

TEXT_VOCAB_SIZE = 151936  # rows of the talker's text embedding; every id must stay below this
NUM_MERGES = 3000
ASSISTANT_TOKEN = "assistant"
ASSISTANT_ID = 77091
CORPUS_FILE = "harvard-sentences.txt"

# (id, content, special) of the Qwen3 added tokens followed by the Qwen3-TTS text specials.
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
    (151669, "<|audio_start|>", True),
    (151670, "<|audio_end|>", True),
    (151671, "<tts_pad>", True),
    (151672, "<tts_text_bos>", True),
    (151673, "<tts_text_eod>", True),
    (151674, "<tts_text_bos_single>", True),
    (151675, "<|audio_pad|>", True),
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table; insertion order is id order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def write_synthetic_tokenizer(out_dir: Path, seed: int = 0) -> None:
    """Write `vocab.json`, `merges.txt` and `tokenizer_config.json` into `out_dir`.

    `seed` only changes how ties between equally frequent pairs are broken while learning merges;
    every seed gives a valid vocabulary of the same size, and seed 0 breaks ties by pair order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab, merges = synthetic_vocab_and_merges(seed)
    with open(out_dir / VOCAB_FILE, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(out_dir / MERGES_FILE, "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        f.writelines(f"{a} {b}\n" for a, b in merges)
    with open(out_dir / TOKENIZER_CONFIG_FILE, "w", encoding="utf-8") as f:
        json.dump(synthetic_tokenizer_config(), f, ensure_ascii=False, indent=2)
        f.write("\n")


def synthetic_tokenizer_config() -> dict:
    """A tokenizer_config.json shaped like the real Qwen2/Qwen3 ones."""
    decoder = {
        str(i): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for i, content, special in ADDED_TOKENS
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for i, c, special in ADDED_TOKENS if special and i != 151643],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def synthetic_vocab_and_merges(seed: int = 0) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab, merges) of the synthetic tokenizer; deterministic for a given seed."""
    vocab, merges = _synthetic_vocab_and_merges(seed)
    return dict(vocab), list(merges)


@functools.cache
def _synthetic_vocab_and_merges(seed: int) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    words = _corpus_words()
    merges = _learn_merges(words, NUM_MERGES, seed)
    merges += _merges_completing(ASSISTANT_TOKEN, merges)
    tokens = list(bytes_to_unicode().values())
    seen = set(tokens)
    for a, b in merges:
        token = a + b
        if token not in seen and token != ASSISTANT_TOKEN:
            seen.add(token)
            tokens.append(token)
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) >= ASSISTANT_ID:
        raise ValueError(f"{len(vocab)} learned tokens would collide with {ASSISTANT_TOKEN!r} at {ASSISTANT_ID}")
    vocab[ASSISTANT_TOKEN] = ASSISTANT_ID
    for i, content, _ in ADDED_TOKENS:
        vocab[content] = i
    if max(vocab.values()) >= TEXT_VOCAB_SIZE:
        raise ValueError(f"token ids must stay below the text embedding size {TEXT_VOCAB_SIZE}")
    return vocab, tuple(merges)


def _corpus_words() -> Counter[str]:
    """Byte-level pre-tokens of the corpus with their counts (the Qwen2 pre-tokenizer's pieces)."""
    text = resources.files("tts_engine").joinpath("data", CORPUS_FILE).read_text(encoding="utf-8")
    return Counter(piece for piece, _ in qwen2_pre_tokenizer().pre_tokenize_str(unicodedata.normalize("NFC", text)))


def _learn_merges(words: Counter[str], num_merges: int, seed: int) -> list[tuple[str, str]]:
    """Classic BPE training: repeatedly merge the most frequent adjacent pair.

    Incremental pair counts plus a lazy max-heap keep this well under a second for the corpus.
    """

    def tie_key(pair: tuple[str, str]) -> tuple[str, str] | bytes:
        if seed == 0:
            return pair
        return hashlib.blake2b(f"{seed}\0{pair[0]}\0{pair[1]}".encode(), digest_size=8).digest()

    seqs = [list(w) for w in words]
    counts = list(words.values())
    pair_count: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for i, seq in enumerate(seqs):
        for pair in pairwise(seq):
            pair_count[pair] += counts[i]
            where[pair].add(i)
    heap = [(-c, tie_key(p), p) for p, c in pair_count.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    while heap and len(merges) < num_merges:
        neg_count, _, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg_count:
            continue  # stale entry: a fresher one with the current count is in the heap
        merges.append(pair)
        touched: set[tuple[str, str]] = set()
        for i in where.pop(pair):
            old = seqs[i]
            new = _merge_pair(old, pair)
            if len(new) == len(old):
                continue
            for p in pairwise(old):
                pair_count[p] -= counts[i]
                touched.add(p)
            for p in pairwise(new):
                pair_count[p] += counts[i]
                where[p].add(i)
                touched.add(p)
            seqs[i] = new
        for p in touched:
            c = pair_count[p]
            if c <= 0:
                del pair_count[p]
                where.pop(p, None)
            else:
                heapq.heappush(heap, (-c, tie_key(p), p))
    return merges


def _merge_pair(seq: list[str], pair: tuple[str, str]) -> list[str]:
    a, b = pair
    out: list[str] = []
    i = 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def _bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """Apply ranked merges to one pre-token (lowest rank first, leftmost occurrence first)."""
    seq = list(word)
    while len(seq) > 1:
        best = min(pairwise(seq), key=lambda p: ranks.get(p, len(ranks)))
        if best not in ranks:
            break
        seq = _merge_pair(seq, best)
    return seq


def _merges_completing(word: str, merges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Extra lowest-priority merges after which BPE turns `word` into a single token."""
    ranks = {p: r for r, p in enumerate(merges)}
    extra: list[tuple[str, str]] = []
    pieces = _bpe(word, ranks)
    while len(pieces) > 1:
        pair = (pieces[0], pieces[1])
        ranks[pair] = len(ranks)
        extra.append(pair)
        pieces = _bpe(word, ranks)
    return extra
