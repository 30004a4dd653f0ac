"""An in-context cloned voice streams with its reference codes as the codec's left context.

The official in-context clone decodes reference + new codes in one piece and cuts the reference's
samples off. Streamed chunks that start from the state after the reference codes must give those
samples: on the reference path (`CodecDecoder.state_after` + `decode_chunk`) and on the engine's
codec runner (`CodecRunner.start`), all-torch and with the fused kernels (Triton's interpreter on
CPU; the CUDA graphs are covered by tests/gpu, which run the same runner).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tests.test_parity import _load_official
from tests.voices.conftest import REFERENCE_TEXT
from tts_engine.runtime.codec_runner import CodecRunner
from tts_engine.synthesizer import Synthesizer

TOL = 1e-4  # the codec parity tests' (tests/model/test_codec.py)
NEW_FRAMES = 23
SCHEDULE = (1, 2, 4, 8, 8)  # the engine's growing first chunks, then its tick's


@pytest.fixture(scope="module")
def ours(tiny_base_checkpoint):
    return Synthesizer(tiny_base_checkpoint)


@pytest.fixture(scope="module")
def ref_codes(ours, reference_24k) -> torch.Tensor:
    clone = ours.clone_voice(reference_24k[:40800], REFERENCE_TEXT)  # 1.7 s: 22 frames, the last one partial
    assert clone.in_context
    return clone.ref_codes


@pytest.fixture(scope="module")
def new_codes(ours) -> torch.Tensor:
    size = ours.codec.cfg.codebook_size
    return torch.randint(0, size, (NEW_FRAMES, 16), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def official_trimmed(official, tiny_base_checkpoint, ref_codes, new_codes) -> np.ndarray:
    """The official package's in-context decode: reference + new codes through its speech tokenizer,
    then the reference's share of the samples cut off as its `generate_voice_clone` does."""
    theirs = _load_official(official, tiny_base_checkpoint)
    full = torch.cat([ref_codes, new_codes])
    with torch.inference_mode():
        wavs, rate = theirs.model.speech_tokenizer.decode([{"audio_codes": full}])
    assert rate == 24000
    wav = np.asarray(wavs[0], dtype=np.float32)
    cut = int(ref_codes.shape[0] / full.shape[0] * wav.shape[0])
    return wav[cut:]


def _chunks(frames: int):
    start, i = 0, 0
    while start < frames:
        n = min(SCHEDULE[min(i, len(SCHEDULE) - 1)], frames - start)
        yield start, n
        start, i = start + n, i + 1


def _assert_matches(streamed: np.ndarray, official: np.ndarray) -> None:
    """The official cut is proportional (int(ref / total * samples)): it may keep one sample of the
    reference's last frame, which a stream cannot know about. The rest must be the same samples."""
    assert len(streamed) == NEW_FRAMES * 1920
    assert len(official) - len(streamed) in (0, 1)
    diff = np.abs(official[len(official) - len(streamed):] - streamed)
    assert diff.max() <= TOL, f"max difference {diff.max():.2e} at sample {int(diff.argmax())}"


@torch.inference_mode()
def test_reference_path_streams_the_official_in_context_audio(ours, ref_codes, new_codes, official_trimmed):
    codec = ours.codec
    state = codec.state_after(ref_codes.T[None])
    assert state.frames.tolist() == [ref_codes.shape[0]]
    pieces = []
    for start, n in _chunks(NEW_FRAMES):
        pcm, state = codec.decode_chunk(new_codes[start:start + n].T[None], state)
        pieces.append(pcm[0])
    _assert_matches(torch.cat(pieces).numpy(), official_trimmed)


@torch.inference_mode()
def test_without_the_left_context_the_first_chunk_differs(ours, new_codes, official_trimmed):
    """The check above can fail: a stream that starts from zeros is audibly off at its start."""
    pcm = ours.codec(new_codes.T[None])[0].numpy()
    head = official_trimmed[len(official_trimmed) - len(pcm):][:1920]
    assert np.abs(head - pcm[:1920]).max() > 100 * TOL


@pytest.mark.parametrize("fused", [False, True], ids=["torch", "fused-kernels"])
@torch.inference_mode()
def test_codec_runner_streams_the_official_in_context_audio(ours, ref_codes, new_codes, official_trimmed, fused):
    """Slot 1 in context beside slot 0, a plain stream in the same batches; then slot 2 starts the same
    voice from the kept state, and slot 1 is reused for a plain stream (its context must not leak)."""
    codec = copy.deepcopy(ours.codec)
    if fused:
        codec.use_fused_kernels()
    runner = CodecRunner(codec, max_streams=3, pad_batches=True)
    plain = ours.codec(new_codes.T[None])[0].numpy()

    def stream(slots: list[int]) -> list[np.ndarray]:
        pieces = [[] for _ in slots]
        for start, n in _chunks(NEW_FRAMES):
            chunk = new_codes[start:start + n].T[None].expand(len(slots), -1, -1)
            for out, pcm in zip(pieces, runner.decode(slots, chunk)):
                out.append(pcm.float().numpy())
        return [np.concatenate(p) for p in pieces]

    runner.start(0)
    runner.start(1, ref_codes)
    zero, in_context = stream([0, 1])
    _assert_matches(in_context, official_trimmed)
    assert np.abs(zero - plain).max() <= TOL
    assert len(runner._contexts) == 1

    runner.start(2, ref_codes)  # from the kept state: one copy
    runner.start(1)
    again, zero = stream([2, 1])
    _assert_matches(again, official_trimmed)
    assert np.abs(zero - plain).max() <= TOL
    assert len(runner._contexts) == 1


def test_codec_runner_refuses_a_malformed_context(ours):
    runner = CodecRunner(ours.codec, max_streams=1)
    with pytest.raises(ValueError, match="context must be"):
        runner.start(0, torch.zeros(4, 8, dtype=torch.long))
