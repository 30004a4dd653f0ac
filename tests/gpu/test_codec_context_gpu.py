"""CodecRunner's left context (an in-context cloned voice's reference codes) through captured CUDA graphs:
the stream continues a whole decode of reference + new codes past the reference's samples, beside a
plain stream in the same batches, and again from the kept state. Real codec config, random weights, fp32."""

from __future__ import annotations

import pytest
import torch

from tts_engine.config import CONFIG_DIR, CodecConfig
from tts_engine.model.codec_init import random_codec_decoder
from tts_engine.runtime.codec_runner import CodecRunner

pytestmark = pytest.mark.gpu

TOL = 1e-4  # tests/gpu/test_codec_graphs.py's


@torch.inference_mode()
def test_a_slot_started_with_context_streams_the_whole_decodes_tail(cuda):
    cfg = CodecConfig.from_file(CONFIG_DIR / "speech_tokenizer.config.json")
    codec = random_codec_decoder(cfg).to(cuda)
    runner = CodecRunner(codec, 4, chunk_sizes=(1, 2, 4, 8), buckets=(1, 2, 4))
    assert runner.capture()["captured"]
    gen = torch.Generator().manual_seed(5)
    ref = torch.randint(0, 2048, (90, 16), generator=gen)  # > the 72-frame window
    new = torch.randint(0, 2048, (23, 16), generator=gen)
    spf = cfg.decoder.samples_per_frame
    want = codec(torch.cat([ref, new]).T[None].to(cuda))[0, -new.shape[0] * spf:].float().cpu()  # TF32 off: `cuda`
    plain = codec(new.T[None].to(cuda))[0].float().cpu()

    def stream(slots):
        out, start = [], 0
        for n in (1, 2, 4, 8, 8):
            chunk = new[start:start + n].T[None].expand(len(slots), -1, -1)
            out.append(runner.decode(slots, chunk).float().cpu())
            start += n
        return torch.cat(out, dim=1)

    runner.start(0)
    runner.start(1, ref)
    got = stream([0, 1])
    assert (got[1] - want).abs().max().item() <= TOL
    assert (got[0] - plain).abs().max().item() <= TOL
    runner.start(3, ref)  # from the kept state
    assert (stream([3])[0] - want).abs().max().item() <= TOL
    assert (plain[:spf] - want[:spf]).abs().max().item() > 100 * TOL  # the context is audible: the check can fail
