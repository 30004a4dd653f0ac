"""Word error rate arithmetic."""

from __future__ import annotations

import pytest

from bench.load.wer import corpus_wer, edit_distance, normalise, word_errors


def test_normalisation():
    assert normalise("It's easy to tell the depth of a well.") == ["it's", "easy", "to", "tell", "the", "depth",
                                                                   "of", "a", "well"]
    assert normalise("Blue-green, UPPER; it’s") == ["blue", "green", "upper", "it's"]
    assert normalise("  ...  ") == []


def ed(ref: str, hyp: str) -> int:
    return edit_distance(ref.split(), hyp.split())


def test_edit_distance_counts_substitutions_deletions_insertions():
    assert ed("a b c", "a b c") == 0
    assert ed("a b c", "a x c") == 1  # substitution
    assert ed("a b c", "a c") == 1  # deletion
    assert ed("a b c", "a b b c") == 1  # insertion
    assert ed("kitten sat on mat", "sitting sat mat the") == 3
    assert ed("", "a b") == 2
    assert ed("a b", "") == 2


def test_wer_and_pooling():
    assert word_errors("The birch canoe slid.", "the birch canoe slid").wer == 0
    assert word_errors("The birch canoe slid.", "The merch can be slid.").wer == pytest.approx(3 / 4)
    assert word_errors("one two", "").wer == 1
    pooled = corpus_wer([("a b c d", "a b c d"), ("e f", "x y")])
    assert (pooled.errors, pooled.words) == (2, 6)
    assert pooled.wer == pytest.approx(1 / 3)  # pooled over words, not the mean of 0 and 1
