"""Fast path on the GPU: graph replay equals eager for every bucket, padded rows write nothing,
and greedy codes equal the reference loop on the real 1.7B config (random weights, fp32)."""

from __future__ import annotations

import pytest
import torch

from tts_engine.checkpoint import random_model
from tts_engine.prompt import Layout, VoiceSpec, build_prompt
from tts_engine.reference import GenerationInput, generate_codes
from tts_engine.runtime.runner import ModelRunner
from tts_engine.sampling import SamplingParams

ROLE, TAIL = [151644, 77091, 198], [151645, 198, 151644, 77091, 198]


def _prompts(cfg, n, layout=Layout.STREAMING):
    voices = ["ryan", "vivian", "aiden", "serena"]
    return [build_prompt(cfg, ROLE + list(range(1000 + 17 * i, 1000 + 17 * i + 6 + i % 5)) + TAIL,
                         VoiceSpec(voices[i % 4], "english"), layout) for i in range(n)]


def _slots(t, index):
    """Select request slots: dim 1 of the [layers, slots, ...] caches, dim 0 otherwise."""
    return t[:, index] if t.dim() == 5 else t[index]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _state(runner):
    return [t.clone() for t in (runner.k_cache, runner.v_cache, runner.hidden, runner.logits, runner.seen)]


def _restore(runner, snap):
    for t, s in zip((runner.k_cache, runner.v_cache, runner.hidden, runner.logits, runner.seen), snap):
        t.copy_(s)


@pytest.fixture(scope="module")
def model_1_7b(cuda):
    return random_model("1.7b", torch.bfloat16, cuda)


def test_graph_replay_equals_eager_for_every_bucket(model_1_7b):
    cfg, model = model_1_7b
    runner = ModelRunner(model, max_slots=64, max_context=512)
    prompts = _prompts(cfg, 64)
    for slot, p in enumerate(prompts):
        runner.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
        runner.prefill(slot, runner.embed_prompt(list(p.text_ids), list(p.codec_ids)))
    runner.capture_graphs()
    for bucket in runner.buckets:
        for b in sorted({bucket, max(1, bucket - 1)}):  # full and padded buckets
            slots = list(range(64 - b, 64))[::-1]
            args = (slots, [3] * b, [len(prompts[s]) for s in slots], [2000 + s for s in slots])
            snap = _state(runner)
            runner.use_graphs = False
            eager = runner.frame_step(*args).clone()
            eager_state = _state(runner)
            _restore(runner, snap)
            runner.use_graphs = True
            graph = runner.frame_step(*args).clone()
            graph_state = _state(runner)
            assert torch.equal(eager, graph), f"codes differ at batch {b}"
            untouched = [s for s in range(64) if s not in slots]
            for e, g, before in zip(eager_state, graph_state, snap):
                # The graph runs the bucket's batch size, so GEMM tiling may differ from eager.
                torch.testing.assert_close(_slots(g, slice(0, 64)).float(), _slots(e, slice(0, 64)).float(),
                                           rtol=2e-2, atol=2e-2)
                assert torch.equal(_slots(before, untouched), _slots(g, untouched)), \
                    "a padded row wrote into a slot it does not own"
            _restore(runner, snap)


def test_short_context_steps_replay_the_fused_attention_graph(model_1_7b):
    """`talker_qk_attention_context`: batch-1 steps under it replay a feed graph of their own
    (kernels/talker_attention.py), equal to the eager step that runs it; steps past it, and batches past
    `talker_gemv_rows`, the split attention's graph."""
    from tts_engine.runtime.options import FastPathOptions

    cfg, model = model_1_7b
    runner = ModelRunner(model, max_slots=4, max_context=512, buckets=(1, 2),
                         options=FastPathOptions(talker_qk_attention_context=64))
    prompts = _prompts(cfg, 2)
    for slot, p in enumerate(prompts):
        runner.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
        runner.prefill(slot, runner.embed_prompt(list(p.text_ids), list(p.codec_ids)))
    runner.capture_graphs()
    assert set(runner.short_feed_graphs) == {(1, v) for v in runner.variants}
    for slots, positions, fused in (([0], [len(prompts[0])], True), ([1], [100], False),
                                    ([1, 0], [len(prompts[1]), len(prompts[0])], False)):
        args = (slots, [3] * len(slots), positions, [2000] * len(slots))
        snap = _state(runner)
        runner.use_graphs = False
        eager = runner.frame_step(*args).clone()
        eager_state = _state(runner)
        assert runner.talker_qk_attention == fused
        _restore(runner, snap)
        runner.use_graphs = True
        graph = runner.frame_step(*args).clone()
        graph_state = _state(runner)
        assert runner.talker_qk_attention == fused
        assert torch.equal(eager, graph), f"codes differ at positions {positions}"
        for e, g in zip(eager_state, graph_state):
            torch.testing.assert_close(g.float(), e.float(), rtol=2e-2, atol=2e-2)
        if fused:  # the same step through the split attention's graph: other hidden states
            _restore(runner, snap)
            runner.qk_attention_context = 0
            runner.frame_step(*args)
            runner.qk_attention_context = 64
            assert not torch.equal(runner.hidden[0], graph_state[2][0]), "the fused step replayed the split graph"
        _restore(runner, snap)


def test_greedy_fast_path_equals_reference_loop_on_1_7b_config(cuda):
    cfg, model = random_model("1.7b", torch.float32, cuda, seed=7)
    frames = 16
    prompts = _prompts(cfg, 3, Layout.STREAMING) + _prompts(cfg, 1, Layout.NON_STREAMING)
    inputs = [GenerationInput(p, SamplingParams.greedy(), 0, frames) for p in prompts]
    reference = generate_codes(model, inputs)
    runner = ModelRunner(model, max_slots=8, max_context=256)
    runner.capture_graphs()  # as the engine does: the prompts then run through the prefill graphs
    for slot, inp in enumerate(inputs):
        runner.start_slot(slot, inp.params, inp.seed, eos_allowed=True)
        runner.prefill(slot, runner.embed_prompt(list(inp.prompt.text_ids), list(inp.prompt.codec_ids)))
    got = [[] for _ in inputs]
    for f in range(frames):
        codes = runner.frame_step(list(range(len(inputs))), [f] * len(inputs),
                                  [len(inp.prompt) + f for inp in inputs],
                                  [inp.prompt.step_text_id(f) for inp in inputs]).cpu()
        for i in range(len(inputs)):
            got[i].append(codes[i])
    for ref, ours in zip(reference, got):
        assert torch.equal(ref, torch.stack(ours[: len(ref)]))


def _random_prompt(t_len: int, g: torch.Generator, text_vocab: int, codec_vocab: int):
    """t_len rows of (text id | None, codec id | None), every mix of the two tracks."""
    text = torch.randint(0, text_vocab, (t_len,), generator=g).tolist()
    codec = torch.randint(0, codec_vocab, (t_len,), generator=g).tolist()
    which = torch.randint(0, 3, (t_len,), generator=g).tolist()  # 0: text only, 1: codec only, 2: both
    return ([t if w != 1 else None for t, w in zip(text, which)], [c if w != 0 else None for c, w in zip(codec, which)])


def test_prefill_graphs_equal_eager_prefill_and_touch_only_their_slot(model_1_7b):
    """`prefill_prompt` through its bucket's graph (the embedding inside it) against the eager
    embedding and prefill of the same ids."""
    cfg, model = model_1_7b
    runner = ModelRunner(model, max_slots=8, max_context=512)
    runner.k_cache.normal_()
    runner.v_cache.normal_()
    runner.capture_prefill_graphs()
    assert sorted(runner.prefill_graphs) == [16, 32, 64, 128, 256]
    g = torch.Generator().manual_seed(0)
    for t_len, slot in ((5, 3), (16, 0), (17, 7), (100, 2), (300, 1), (11, 4), (12, 5)):  # 300: no bucket, eager
        text_ids, codec_ids = _random_prompt(t_len, g, cfg.talker.text_vocab_size, cfg.talker.vocab_size)
        before = _state(runner)
        graphs, runner.prefill_graphs = runner.prefill_graphs, {}
        runner.prefill_prompt(slot, text_ids, codec_ids)
        eager = _state(runner)
        _restore(runner, before)
        runner.prefill_graphs = graphs
        runner.prefill_prompt(slot, text_ids, codec_ids)
        graph = _state(runner)
        others = [s for s in range(runner.max_slots + 1) if s != slot]
        for gr, b in zip(graph, before):
            assert torch.equal(_slots(gr, others), _slots(b, others)), f"T={t_len}: wrote another slot"
        for e, gr in zip(eager[:2], graph[:2]):  # K/V of the prompt's positions
            torch.testing.assert_close(gr[:, slot, :, :t_len].float(), e[:, slot, :, :t_len].float(),
                                       rtol=2e-2, atol=2e-2)
        for e, gr in zip(eager[2:4], graph[2:4]):  # hidden, logits
            torch.testing.assert_close(gr[slot].float(), e[slot].float(), rtol=2e-2, atol=2e-2)
        _restore(runner, before)


def test_async_steps_queued_ahead_give_each_steps_codes_on_the_host(model_1_7b):
    """Three frame steps queued before any is read (within the ring of STEP_RING = 4, as the
    depth-2 engine reads them): each StepCodes.host() holds its own step's codes, equal to the
    same steps run one by one."""
    cfg, model = model_1_7b
    runner = ModelRunner(model, max_slots=8, max_context=256)
    prompts = _prompts(cfg, 3)
    runner.capture_graphs()
    for slot, p in enumerate(prompts):
        runner.start_slot(slot, SamplingParams(seed=slot), slot, eos_allowed=True)
        runner.prefill(slot, runner.embed_prompt(list(p.text_ids), list(p.codec_ids)))
    snap = _state(runner)
    slots = [0, 1, 2]

    def args(f):
        return slots, [f] * 3, [len(prompts[s]) + f for s in slots], [2000 + s for s in slots]

    one_by_one = [runner.frame_step(*args(f)).cpu() for f in range(3)]
    _restore(runner, snap)
    pending = [runner.frame_step_async(*args(f)) for f in range(3)]
    for f, step in enumerate(pending):
        assert torch.equal(step.host(), one_by_one[f]), f"step {f}: host codes differ"
