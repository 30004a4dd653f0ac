"""Request texts from the packaged Harvard sentences."""

from __future__ import annotations

import pytest

from bench.load.corpus import CharMix, harvard_sentences, paragraph_for, prompt_for


def test_the_sentences_ship_as_package_data():
    sentences = harvard_sentences()
    assert len(sentences) == 720
    assert sentences[0] == "The birch canoe slid on the smooth planks."
    assert all(s.endswith((".", "?", "!")) for s in sentences)


def test_prompts_are_deterministic_joins_of_one_to_three_consecutive_sentences():
    pool = harvard_sentences()
    prompts = [prompt_for(4, i) for i in range(300)]
    assert prompts == [prompt_for(4, i) for i in range(300)]
    assert prompts != [prompt_for(5, i) for i in range(300)]
    assert {p.sentences for p in prompts} == {1, 2, 3}
    for p in prompts:
        first = next(i for i, s in enumerate(pool) if p.text.startswith(s))
        assert p.text == " ".join(pool[(first + k) % len(pool)] for k in range(p.sentences))


def test_max_join_one_gives_single_sentences():
    assert all(prompt_for(0, i, max_join=1).sentences == 1 for i in range(50))


def test_char_mix():
    prompts = [prompt_for(0, i) for i in range(60)]
    mix = CharMix.of(prompts)
    assert mix.requests == 60 and sum(mix.by_sentences.values()) == 60
    assert mix.chars_min == min(len(p.text) for p in prompts)
    assert mix.chars_max == max(len(p.text) for p in prompts)
    assert 30 < mix.chars_mean < 130  # ~39 characters a sentence, 2 on average


def test_the_long_form_mix_is_paragraphs_of_consecutive_sentences_within_the_range():
    pool = harvard_sentences()
    paragraphs = [paragraph_for(2, i, 500, 1500) for i in range(300)]
    assert paragraphs == [paragraph_for(2, i, 500, 1500) for i in range(300)]
    lengths = [len(p.text) for p in paragraphs]
    assert 500 <= min(lengths) < 600 and 1400 < max(lengths) <= 1500  # spread over the whole range
    for p in paragraphs:
        first = next(i for i, s in enumerate(pool) if p.text.startswith(s))
        assert p.text == " ".join(pool[(first + k) % len(pool)] for k in range(p.sentences))
    with pytest.raises(ValueError, match="longest sentence"):
        paragraph_for(0, 0, 500, 540)  # narrower than a sentence: no length in range is sure to exist
