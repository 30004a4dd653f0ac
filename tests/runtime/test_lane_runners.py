"""The newcomer lane's runners (ModelRunner.lane_runner, CodecRunner.lane_runner) on CPU: the same
weights and per-slot state as the main runners, a code-predictor KV cache of their own; a stream
started on the lane and continued on the main runner makes the codes and audio the main runner
alone makes. (On CUDA their graphs replay on the lane's stream: tests/gpu/test_engine_gpu.py.)"""

from __future__ import annotations

import pytest
import torch

from tests.threads import one_torch_thread
from tts_engine.loading import load_checkpoint
from tts_engine.runtime.codec_runner import CodecRunner
from tts_engine.runtime.runner import ModelRunner
from tts_engine.sampling import SamplingParams

TEXT = [151644, 77091, 198] + [151671] * 6 + [151672, 1000]
CODEC = [None] * 3 + [2154, 2156, 2050, 2157, 3061, 2148, 2149] + [None]
PAD = 151671


@pytest.fixture(scope="module")
def ckpt(tiny_checkpoint):
    with one_torch_thread():
        yield load_checkpoint(tiny_checkpoint)


def test_a_stream_started_on_the_lane_continues_on_the_main_runner(ckpt):
    main = ModelRunner(ckpt.model, max_slots=4, max_context=128)
    lane = main.lane_runner()
    assert lane.code_predictor.heads is main.code_predictor.heads  # weights shared
    assert lane.code_predictor.k.shape[1] == 1 and lane.code_predictor.k is not main.code_predictor.k
    assert lane.k_cache is main.k_cache and lane.hidden is main.hidden and lane.buckets == (1,)
    x = main.embed_prompt(TEXT, CODEC)
    t = x.shape[0]
    with torch.inference_mode():
        for slot in (0, 1):  # the same request in two slots
            main.start_slot(slot, SamplingParams(seed=5), 5, eos_allowed=False)
        main.prefill(0, x)
        lane.prefill(1, x)
        alone, mixed = [], []
        for frame in range(5):
            alone.append(main.frame_step([0], [frame], [t + frame], [PAD]).clone())
            runner = lane if frame < 2 else main  # frames 0 and 1 on the lane, as the engine does
            mixed.append(runner.frame_step([1], [frame], [t + frame], [PAD]).clone())
    assert torch.equal(torch.cat(alone), torch.cat(mixed))


def test_the_codec_lane_runner_shares_the_stream_state(ckpt):
    codec = ckpt.codec
    main = CodecRunner(codec, 4)
    lane = main.lane_runner((1, 2))
    assert lane.state is main.state and lane.buckets == (1,) and lane.chunk_sizes == (1, 2)
    codes = torch.randint(0, 2048, (1, 16, 5), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for slot in (0, 1):
            main.reset(slot)
        alone = main.decode([0], codes)
        first = lane.decode([1], codes[:, :, :1])  # the first chunk on the lane, the rest on the main runner
        rest = main.decode([1], codes[:, :, 1:])
    assert torch.allclose(alone, torch.cat([first, rest], dim=1), atol=1e-5)


def test_the_lanes_first_chunk_limit_fits_the_pinned_ring():
    """A newcomer's lane steps (first-chunk frames + 1) are queued at once on one runner, whose pinned
    ring holds STEP_RING steps' codes."""
    from tts_engine.runtime.runner import STEP_RING
    from tts_engine.scheduler.config import LANE_MAX_FIRST_CHUNK

    assert LANE_MAX_FIRST_CHUNK + 1 <= STEP_RING
