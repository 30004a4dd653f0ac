"""Request texts: the Harvard sentences shipped with tts_engine (package data), one sentence or a
join of up to `max_join` consecutive ones (agent-like lengths), or a paragraph of consecutive ones
between two lengths (the long-form mix: audiobooks, long answers), chosen from (seed, index) alone
so request i has the same text at every rate and in every run with that seed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .arrivals import hash_unit


@cache
def harvard_sentences() -> tuple[str, ...]:
    text = resources.files("tts_engine").joinpath("data/harvard-sentences.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


@cache
def longest_sentence() -> int:
    """Characters of the longest sentence: a paragraph's length range must be wider than this."""
    return max(map(len, harvard_sentences()))


@dataclass(frozen=True)
class Prompt:
    text: str
    sentences: int


def prompt_for(seed: int, index: int, max_join: int = 3) -> Prompt:
    """1..max_join consecutive sentences (uniform count), starting anywhere (wrapping around)."""
    if max_join < 1:
        raise ValueError(f"max_join must be >= 1, got {max_join}")
    pool = harvard_sentences()
    count = 1 + int(hash_unit(seed, index, "join") * max_join)
    start = int(hash_unit(seed, index, "text") * len(pool))
    return Prompt(" ".join(pool[(start + k) % len(pool)] for k in range(count)), count)


def paragraph_for(seed: int, index: int, min_chars: int, max_chars: int) -> Prompt:
    """Consecutive sentences, starting anywhere, up to a length drawn uniformly from
    [min_chars, max_chars]: the text ends in that range (the range must be wider than a sentence)."""
    pool, longest = harvard_sentences(), longest_sentence()
    if not (min_chars > 0 and max_chars - min_chars > longest):
        raise ValueError(f"need 0 < min_chars and max_chars - min_chars > {longest} (the longest sentence), "
                         f"got {min_chars}, {max_chars}")
    goal = min_chars + hash_unit(seed, index, "length") * (max_chars - min_chars)
    start = int(hash_unit(seed, index, "text") * len(pool))
    parts: list[str] = []
    length = -1  # no space before the first sentence
    while length < goal:
        sentence = pool[(start + len(parts)) % len(pool)]
        if length + 1 + len(sentence) > max_chars:
            break
        parts.append(sentence)
        length += 1 + len(sentence)
    return Prompt(" ".join(parts), len(parts))


@dataclass(frozen=True)
class CharMix:
    """What the texts of a run look like (reported beside the results)."""
    requests: int
    chars_mean: float
    chars_min: int
    chars_max: int
    by_sentences: dict[int, int]  # sentences joined -> requests

    @staticmethod
    def of(prompts: list[Prompt]) -> CharMix:
        lengths = [len(p.text) for p in prompts] or [0]
        by = Counter(p.sentences for p in prompts)
        return CharMix(len(prompts), sum(lengths) / len(lengths), min(lengths), max(lengths), dict(sorted(by.items())))
