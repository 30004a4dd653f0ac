"""Request texts from the packaged Harvard sentences."""

from __future__ import annotations

from bench.load.corpus import CharMix, harvard_sentences, prompt_for


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
