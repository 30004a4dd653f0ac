"""Word error rate: (substitutions + deletions + insertions) / reference words, after the same
normalisation of both sides (case, punctuation, hyphens, spelled digits are left alone)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9']+")


def normalise(text: str) -> list[str]:
    """Lower-case words; punctuation and hyphens split or vanish, apostrophes inside words stay
    ("it's" stays one word, "blue-green" becomes two)."""
    return [w.strip("'") for w in _WORD.findall(text.lower().replace("’", "'")) if w.strip("'")]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance over words (one row of the DP table kept)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


@dataclass(frozen=True)
class WerCount:
    errors: int
    words: int

    @property
    def wer(self) -> float:
        return self.errors / self.words if self.words else 0.0


def word_errors(reference: str, hypothesis: str) -> WerCount:
    ref = normalise(reference)
    return WerCount(edit_distance(ref, normalise(hypothesis)), len(ref))


def corpus_wer(pairs: list[tuple[str, str]]) -> WerCount:
    """Pooled over utterances (total errors / total words), so long texts weigh more."""
    counts = [word_errors(r, h) for r, h in pairs]
    return WerCount(sum(c.errors for c in counts), sum(c.words for c in counts))
