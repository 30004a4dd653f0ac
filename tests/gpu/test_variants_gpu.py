"""Greedy fast path equals the reference loop for every 12 Hz layout and prompt kind on the real
configs (random weights, fp32): 0.6B CustomVoice, and cloned-voice prompts (speaker embedding only,
and in context with reference frames) on the 1.7B and 0.6B configs."""

from __future__ import annotations

import pytest
import torch

from tts_engine.checkpoint import random_model
from tts_engine.prompt import Layout, VoiceSpec, build_prompt
from tts_engine.reference import GenerationInput, generate_codes
from tts_engine.runtime.runner import ModelRunner
from tts_engine.sampling import SamplingParams
from tts_engine.voices.clone import ClonePrompt
from tts_engine.voices.rows import embed_clone_prompt

ROLE, TAIL = [151644, 77091, 198], [151645, 198, 151644, 77091, 198]
FRAMES = 16


def _text(i: int) -> list[int]:
    return ROLE + list(range(1000 + 17 * i, 1000 + 17 * i + 6 + i % 5)) + TAIL


def _run_both(model, prompts) -> None:
    inputs = [GenerationInput(p, SamplingParams.greedy(), 0, FRAMES) for p in prompts]
    reference = generate_codes(model, inputs)
    runner = ModelRunner(model, max_slots=8, max_context=256)
    runner.capture_graphs()
    for slot, inp in enumerate(inputs):
        runner.start_slot(slot, inp.params, inp.seed, eos_allowed=True)
        runner.prefill(slot, embed_clone_prompt(runner, inp.prompt))
    got = [[] for _ in inputs]
    for f in range(FRAMES):
        codes = runner.frame_step(list(range(len(inputs))), [f] * len(inputs),
                                  [len(inp.prompt) + f for inp in inputs],
                                  [inp.prompt.step_text_id(f) for inp in inputs]).cpu()
        for i in range(len(inputs)):
            got[i].append(codes[i])
    for ref, ours in zip(reference, got, strict=True):
        assert torch.equal(ref, torch.stack(ours[: len(ref)]))


def test_greedy_fast_path_equals_reference_loop_on_0_6b_config(cuda):
    cfg, model = random_model("0.6b", torch.float32, cuda, seed=7)
    voices = ["ryan", "vivian", "eric", "serena"]
    prompts = [build_prompt(cfg, _text(i), VoiceSpec(voices[i], "english"),
                            Layout.STREAMING if i < 3 else Layout.NON_STREAMING) for i in range(4)]
    _run_both(model, prompts)


@pytest.mark.parametrize("size", ["1.7b", "0.6b"])
def test_greedy_fast_path_equals_reference_loop_for_cloned_voices(cuda, size):
    cfg, model = random_model(size, torch.float32, cuda, seed=9)
    base = cfg.__class__.from_dict({**cfg.raw, "tts_model_type": "base",
                                    "talker_config": {**cfg.raw["talker_config"], "spk_id": {}, "spk_is_dialect": {}}})
    g = torch.Generator().manual_seed(1)
    h = cfg.talker.hidden_size
    x_vector = ClonePrompt(torch.randn(h, generator=g))
    in_context = ClonePrompt(torch.randn(h, generator=g), torch.randint(0, 2048, (30, 16), generator=g),
                             tuple(range(2000, 2012)), "reference")
    prompts = [build_prompt(base, _text(i), VoiceSpec("v", "english", cloned=clone), layout)
               for i, (clone, layout) in enumerate([(x_vector, Layout.STREAMING), (x_vector, Layout.NON_STREAMING),
                                                    (in_context, Layout.STREAMING),
                                                    (in_context, Layout.NON_STREAMING)])]
    _run_both(model, prompts)
