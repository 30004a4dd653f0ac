"""A prompt's embedding inside the prefill graph (runtime/prefill.py) on CPU: `embed_ids`, what the
graph runs on the device from the staged ids, equals `embed_prompt` row for row, and a bucket's
padding rows (no id on either track) are zero rows; `prefill_prompt` without graphs is the eager
embedding and prefill. (The graphs themselves: tests/gpu/test_fast_path_gpu.py.)"""

from __future__ import annotations

import pytest
import torch

from tests.threads import one_torch_thread
from tts_engine.loading import load_checkpoint
from tts_engine.runtime.prefill import NO_ID
from tts_engine.runtime.runner import ModelRunner

# Rows with a text id only (0-2, 10), both (3, 5-9, 11), a codec id only (4).
TEXT = [151644, 77091, 198, 151671, None] + [151671] * 4 + [151672, 1000, 1001]
CODEC = [None] * 3 + [2154, 2156, 2050, 2157, 3061, 2148, 2149] + [None, 2050]


@pytest.fixture(scope="module")
def runner(tiny_checkpoint):
    with one_torch_thread():
        yield ModelRunner(load_checkpoint(tiny_checkpoint).model, max_slots=4, max_context=128)


def _ids(values, pad_to):
    return torch.tensor([NO_ID if v is None else v for v in values] + [NO_ID] * (pad_to - len(values)))


def test_embedding_from_staged_ids_equals_the_eager_embedding_and_pads_with_zero_rows(runner):
    with torch.inference_mode():
        want = runner.embed_prompt(TEXT, CODEC)
        got = runner.embed_ids(_ids(TEXT, 16), _ids(CODEC, 16))
    t = len(TEXT)
    assert got.shape == (16, want.shape[1]) and got.dtype == want.dtype
    torch.testing.assert_close(got[:t], want, rtol=1e-6, atol=1e-6)
    assert torch.equal(got[t:], torch.zeros_like(got[t:]))
    assert torch.equal(got[4], runner.codec_embedding[CODEC[4]])  # a codec id only: no text track added
    # a text id only (a GEMM over 16 rows or 1 may sum in another order: close, not equal)
    torch.testing.assert_close(got[10], runner.text_embed(torch.tensor([1000]))[0], rtol=1e-6, atol=1e-6)


def test_prefill_prompt_without_graphs_is_the_eager_embedding_and_prefill(runner):
    with torch.inference_mode():
        runner.prefill_prompt(1, TEXT, CODEC)
        hidden, logits = runner.hidden[1].clone(), runner.logits[1].clone()
        runner.prefill(2, runner.embed_prompt(TEXT, CODEC))
    assert torch.equal(hidden, runner.hidden[2]) and torch.equal(logits, runner.logits[2])


def test_a_prompt_whose_tracks_differ_in_length_is_refused(runner):
    with pytest.raises(ValueError, match="one id \\(or None\\) a row, got 12 text and 11 codec rows"):
        runner.prefill_prompt(0, TEXT, CODEC[:-1])
