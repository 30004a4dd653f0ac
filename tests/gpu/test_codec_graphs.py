"""CodecRunner on the GPU, real codec config with random weights: every captured (chunk length,
bucket) graph replays to what the eager path gives, padded rows included, and the streams it
decodes equal whole-sequence decodes. fp32 with TF32 off (the runner turns it off itself too).
Capturing all 42 graphs takes about a minute (cuDNN times its algorithms for every shape once)."""

from __future__ import annotations

import copy

import pytest
import torch

from tts_engine.config import CONFIG_DIR, CodecConfig
from tts_engine.model.codec import CodecDecoder
from tts_engine.model.codec_init import random_codec_decoder
from tts_engine.runtime.codec_runner import BUCKETS, CHUNK_SIZES, CodecRunner, pcm_to_s16

pytestmark = pytest.mark.gpu

TOL = 1e-4
MAX_STREAMS = 40  # > the largest bucket: batches of 33..40 are split


@pytest.fixture(scope="module")
def codec(cuda) -> CodecDecoder:
    cfg = CodecConfig.from_file(CONFIG_DIR / "speech_tokenizer.config.json")
    return random_codec_decoder(cfg).to(cuda)


class _Pair:
    """A graph runner and an eager runner fed the same chunks; every chunk's PCM is compared."""

    def __init__(self, codec: CodecDecoder, **kw):
        self.graphs = CodecRunner(codec, MAX_STREAMS, **kw)
        self.eager = CodecRunner(codec, MAX_STREAMS, use_graphs=False, pad_batches=True, **kw)
        self.report = self.graphs.capture()
        self.gen = torch.Generator().manual_seed(0)
        self.codes: list[list[torch.Tensor]] = [[] for _ in range(MAX_STREAMS)]  # [16, t] per chunk
        self.pcm: list[list[torch.Tensor]] = [[] for _ in range(MAX_STREAMS)]
        self.offset = 0

    def next_slots(self, n: int) -> list[int]:
        """n distinct slots, rotating so that every slot gets a share of the frames."""
        slots = [(self.offset + i) % MAX_STREAMS for i in range(n)]
        self.offset = (self.offset + n) % MAX_STREAMS
        return slots

    def step(self, slots: list[int], t: int, tol: float) -> None:
        codes = torch.randint(0, 2048, (len(slots), 16, t), generator=self.gen)
        got = self.graphs.decode(slots, codes)
        want = self.eager.decode(slots, codes)
        assert got.shape == want.shape == (len(slots), t * 1920)
        diff = (got.float().cpu() - want.float().cpu()).abs().max().item()
        assert diff <= tol, f"t={t}, batch {len(slots)}: graph vs eager max diff {diff:.2e}"
        for i, s in enumerate(slots):
            self.codes[s].append(codes[i])
            self.pcm[s].append(got[i].float().cpu())


def test_graph_replay_equals_eager_for_every_captured_chunk_and_bucket(codec):
    pair = _Pair(codec)
    expected = {(t, b) for t in CHUNK_SIZES for b in BUCKETS}
    assert not pair.report["skipped"], f"skipped on an H200: {pair.report}"
    assert not pair.report["mismatched"], f"graphs that replayed wrong at capture: {pair.report}"
    assert set(pair.graphs.graphs) == expected
    # Prime every slot past the 72-frame window so the K/V rings are full (bucket 32 and 8, t=12).
    for _ in range(7):
        pair.step(list(range(32)), 12, TOL)
        pair.step(list(range(32, MAX_STREAMS)), 12, TOL)
    previous = {b: p for p, b in zip((0, *BUCKETS), BUCKETS)}
    for t, bucket in sorted(expected):
        # A full bucket, and the smallest batch that maps to it (the most padding rows).
        for n in sorted({bucket, previous[bucket] + 1}):
            pair.step(pair.next_slots(n), t, TOL)
    # Above the largest bucket and the largest chunk: split into captured pieces.
    pair.step(list(range(MAX_STREAMS)), 13, TOL)
    pair.step(pair.next_slots(5), 30, TOL)
    # The int16 samples a replay makes beside its PCM (what the engine sends) are the eager PCM's, converted.
    for t, n in ((2, 32), (3, 7)):  # 3: two replays
        slots, codes = pair.next_slots(n), torch.randint(0, 2048, (n, 16, t), generator=pair.gen)
        got, want = pair.graphs.decode(slots, codes, s16=True), pcm_to_s16(pair.eager.decode(slots, codes))
        assert got.dtype == want.dtype == torch.int16
        assert (got.int() - want.int()).abs().max().item() <= TOL * 32767 + 1, (t, n)

    g, e = pair.graphs.state, pair.eager.state
    assert torch.equal(g.frames[:MAX_STREAMS], e.frames[:MAX_STREAMS])
    for a, b in zip(g.tensors()[1:], e.tensors()[1:]):
        rows = a[:, :MAX_STREAMS] if a.dim() == 5 else a[:MAX_STREAMS]
        ref = b[:, :MAX_STREAMS] if b.dim() == 5 else b[:MAX_STREAMS]
        assert (rows - ref).abs().max().item() <= TOL

    # The plain reference: each slot's chunks equal one whole-sequence decode of its codes.
    with torch.inference_mode():
        for s in range(MAX_STREAMS):
            codes = torch.cat(pair.codes[s], dim=1)[None].cuda()  # [1, 16, T]
            full = codec(codes)[0]
            diff = (torch.cat(pair.pcm[s]) - full.float().cpu()).abs().max().item()
            assert diff <= TOL, f"slot {s} ({codes.shape[2]} frames): max diff {diff:.2e}"
            assert g.frames[s].item() == codes.shape[2]


def test_eager_decode_restores_the_callers_tf32_flags(codec):
    runner = CodecRunner(codec, 2, use_graphs=False)
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        runner.decode([0], torch.zeros(1, 16, 1, dtype=torch.long))
        assert torch.backends.cudnn.allow_tf32 is True
        assert torch.backends.cuda.matmul.allow_tf32 is saved[0]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_bf16_codec_graphs_replay_to_eager(codec):
    model = copy.deepcopy(codec).to(torch.bfloat16)
    pair = _Pair(model, chunk_sizes=(1, 4), buckets=(1, 4))
    assert pair.graphs.state.keys.dtype == torch.bfloat16
    assert set(pair.graphs.graphs) == {(1, 1), (1, 4), (4, 1), (4, 4)}, pair.report
    for t, n in ((4, 3), (1, 1), (4, 4), (1, 2), (5, 4), (4, 1)):
        pair.step(pair.next_slots(n), t, 1e-2)
    assert all(torch.cat(p).isfinite().all() for p in pair.pcm if p)


@pytest.mark.parametrize("fast", [{"window_max": 0}, {}, {"window_max": 1 << 40}, {"rope_kv": False},
                                  {"conv_windows": False}],
                         ids=["cudnn-window", "default", "window-all", "torch-rope-kv", "torch-conv-window"])
@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
def test_fused_codec_graphs_equal_the_all_torch_eager_decode(codec, tf32, fast):
    """The served codec (`use_fused_kernels`: Triton SnakeBeta, RMSNorm and SwiGLU, the projected
    quantizer table, packed layers; the dense convs on cuDNN or as window GEMMs; RoPE and the K/V
    window in one kernel; each conv's input window in one kernel) replayed from graphs against the
    all-torch eager runner, each fast path also with one of its kernels off."""
    fused = copy.deepcopy(codec).use_fused_kernels(**fast)
    graphs = CodecRunner(fused, 8, chunk_sizes=(1, 2), buckets=(1, 8), allow_tf32=tf32)
    eager = CodecRunner(codec, 8, use_graphs=False, allow_tf32=tf32)
    report = graphs.capture()
    assert set(graphs.graphs) == {(1, 1), (1, 8), (2, 1), (2, 8)}, report
    gen = torch.Generator().manual_seed(3)
    for slots, t in (([0], 1), (list(range(8)), 1), ([0, 3, 5], 2), (list(range(8)), 2), ([7], 2)):
        codes = torch.randint(0, 2048, (len(slots), 16, t), generator=gen)
        got, want = graphs.decode(slots, codes).float().cpu(), eager.decode(slots, codes).float().cpu()
        if tf32:  # TF32's 10-bit mantissa rounds differently along the two paths: within 40 dB
            assert (got - want).pow(2).mean().sqrt() <= 0.01 * want.pow(2).mean().sqrt(), (slots, t)
        else:
            assert (got - want).abs().max().item() <= TOL, (slots, t)
