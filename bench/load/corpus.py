"""Request texts: the Harvard sentences shipped with tts_engine (package data), one sentence or a
join of up to `max_join` consecutive ones (agent-like lengths), chosen from (seed, index) alone so
request i has the same text at every rate and in every run with that seed."""

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
