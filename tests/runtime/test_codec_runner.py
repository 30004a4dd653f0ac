"""CodecRunner on CPU (tiny codec): batched slot decoding equals each stream's own full decode."""

from __future__ import annotations

import random

import pytest
import torch

from tts_engine.config import CONFIG_DIR, CodecConfig
from tts_engine.model.codec import CodecDecoder
from tts_engine.model.codec_init import random_codec_decoder
from tts_engine.runtime.codec_runner import CodecRunner, pcm_to_s16

TOL = 1e-4
SPF = 1920


@pytest.fixture(scope="module")
def codec() -> CodecDecoder:
    cfg = CodecConfig.from_file(CONFIG_DIR / "tiny-speech_tokenizer.config.json")
    return random_codec_decoder(cfg)


def _codes(frames: int, seed: int, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, 2048, (batch, 16, frames), generator=torch.Generator().manual_seed(seed))


def _snapshot(runner: CodecRunner, slot: int) -> list[torch.Tensor]:
    s = runner.state
    return [s.frames[slot].clone(), s.keys[:, slot].clone(), s.values[:, slot].clone(),
            *(h[slot].clone() for h in s.history)]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("pad_batches", [False, True], ids=["exact-batches", "padded-to-buckets"])
@pytest.mark.parametrize("seed", [0, 1])
@torch.inference_mode()
def test_interleaved_streams_batched_by_chunk_length_equal_full_decodes(codec, seed, pad_batches):
    rng = random.Random(seed)
    # 76 frames > sliding window 72; 13 > the largest chunk size (split); 5 streams > bucket 4 (split).
    lengths = [76, 7, 23, 1, 30]
    slots = rng.sample(range(9), len(lengths))  # streams sit in arbitrary slots, some slots unused
    codes = [_codes(n, seed=100 * seed + i) for i, n in enumerate(lengths)]
    runner = CodecRunner(codec, max_streams=9, buckets=(1, 2, 4), pad_batches=pad_batches)
    done = [0] * len(lengths)
    pcm: list[list[torch.Tensor]] = [[] for _ in lengths]
    batch_sizes = set()
    while any(d < n for d, n in zip(done, lengths)):
        # One engine step: a random subset of unfinished streams is due, each with its own chunk
        # length; streams whose chunks have the same length decode together.
        due: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            if done[i] < n and rng.random() < 0.8:
                t = min(rng.choice([1, 1, 2, 3, 4, 8, 12, 13]), n - done[i])
                due.setdefault(t, []).append(i)
        for t, streams in due.items():
            rng.shuffle(streams)
            batch = torch.cat([codes[i][:, :, done[i]:done[i] + t] for i in streams])  # [B, 16, t]
            out = runner.decode([slots[i] for i in streams], batch)
            assert out.shape == (len(streams), t * SPF)
            for i, row in zip(streams, out):
                pcm[i].append(row)
                done[i] += t
            batch_sizes.add(len(streams))
    assert max(batch_sizes) > 1
    for i, n in enumerate(lengths):
        full = codec(codes[i])[0]
        assert (torch.cat(pcm[i]) - full).abs().max().item() <= TOL, f"stream {i} ({n} frames)"
        assert runner.state.frames[slots[i]].item() == n


@torch.inference_mode()
def test_reset_gives_from_scratch_decoding_and_leaves_other_slots_alone(codec):
    runner = CodecRunner(codec, max_streams=4)
    first, other, fresh = _codes(30, 1), _codes(30, 2), _codes(20, 3)
    runner.decode([0, 3], torch.cat([first[:, :, :18], other[:, :, :18]]))
    runner.reset(0)
    assert runner.state.frames[0].item() == 0
    # Slot 0 now starts a new stream while slot 3 continues its old one, in the same batch.
    a = runner.decode([0, 3], torch.cat([fresh[:, :, :12], other[:, :, 18:]]))
    b = runner.decode([0], fresh[:, :, 12:])
    assert (torch.cat([a[0], b[0]]) - codec(fresh)[0]).abs().max().item() <= TOL
    tail = codec(other)[0, 18 * SPF:]
    assert (a[1] - tail).abs().max().item() <= TOL


@torch.inference_mode()
def test_scratch_rows_never_disturb_real_slots(codec):
    runner = CodecRunner(codec, max_streams=6, buckets=(1, 4, 8), pad_batches=True)
    codes = _codes(10, 4, batch=3)
    untouched = _snapshot(runner, 5)
    # Poison the scratch slot: padded rows read it, and it must not leak into real rows.
    s, scratch = runner.state, runner.scratch
    s.frames[scratch] = 10**9
    s.keys[:, scratch] = float("nan")
    s.values[:, scratch] = float("inf")
    for h in s.history:
        h[scratch] = float("nan")
    pieces = [runner.decode([4, 0, 2], codes[:, :, :3]), runner.decode([4, 0, 2], codes[:, :, 3:])]
    out = torch.cat(pieces, dim=1)  # 3 rows in bucket 4: one padding row per call
    assert out.isfinite().all()
    assert (out - codec(codes)).abs().max().item() <= TOL
    assert _same(_snapshot(runner, 5), untouched)
    assert all(s.frames[i].item() == 0 for i in (1, 3, 5))


@torch.inference_mode()
def test_decode_through_the_runner_equals_decode_chunk_per_stream(codec):
    runner = CodecRunner(codec, max_streams=3)
    codes = _codes(9, 5, batch=3)
    states = [codec.new_state(1) for _ in range(3)]
    for start, t in ((0, 2), (2, 4), (6, 3)):
        out = runner.decode([2, 0, 1], codes[:, :, start:start + t])
        for i, state in enumerate(states):
            ref, _ = codec.decode_chunk(codes[i:i + 1, :, start:start + t], state)
            assert (out[i] - ref[0]).abs().max().item() <= TOL
    for i, slot in enumerate([2, 0, 1]):
        got = _snapshot(runner, slot)
        want = [states[i].frames[0], states[i].keys[:, 0], states[i].values[:, 0],
                *(h[0] for h in states[i].history)]
        assert all((g.float() - w.float()).abs().max().item() <= TOL for g, w in zip(got, want, strict=True))


def test_split_uses_the_largest_chunk_sizes_that_fit(codec):
    runner = CodecRunner(codec, max_streams=2, chunk_sizes=(1, 4, 12))
    assert runner._split(29, 1) == [12, 12, 4, 1]
    assert runner._split(3, 1) == [1, 1, 1]
    assert CodecRunner(codec, max_streams=2, chunk_sizes=(4,))._split(6, 1) == [4, 2]


def test_buckets_stop_at_the_first_that_holds_every_stream(codec):
    assert CodecRunner(codec, max_streams=3).buckets == (1, 2, 4)
    assert CodecRunner(codec, max_streams=32).buckets == (1, 2, 4, 8, 16, 32)
    assert CodecRunner(codec, max_streams=64).buckets == (1, 2, 4, 8, 16, 32)


@pytest.mark.parametrize(("slots", "shape", "message"), [
    ([0, 0], (2, 16, 1), "distinct"),
    ([3], (1, 16, 1), "slots must lie"),  # 3 is the scratch slot of a 3-stream runner
    ([-1], (1, 16, 1), "slots must lie"),
    ([0], (2, 16, 1), "codes must be"),
    ([0], (1, 15, 1), "codes must be"),
    ([0], (1, 16, 0), "codes must be"),
    ([], (0, 16, 1), "at least one slot"),
])
def test_bad_calls_raise_value_errors(codec, slots, shape, message):
    runner = CodecRunner(codec, max_streams=3)
    with pytest.raises(ValueError, match=message):
        runner.decode(slots, torch.zeros(shape, dtype=torch.long))


def test_reset_rejects_the_scratch_slot(codec):
    with pytest.raises(ValueError, match="outside"):
        CodecRunner(codec, max_streams=3).reset(3)


def test_capture_needs_cuda(codec):
    with pytest.raises(RuntimeError, match="CUDA"):
        CodecRunner(codec, max_streams=1).capture()


class _FakeGraph:
    """Stands in for a CUDA graph on CPU: replay runs the eager step into the static output."""

    def __init__(self, runner: CodecRunner, slot_ids, codes, pcm, s16, error: float):
        self.runner, self.slot_ids, self.codes, self.error = runner, slot_ids, codes, error
        self.pcm, self.s16 = pcm, s16

    def replay(self) -> None:
        self.pcm.copy_(self.runner._step(self.slot_ids, self.codes) + self.error)
        self.s16.copy_(pcm_to_s16(self.pcm))


@torch.inference_mode()
def test_verify_graphs_drops_graphs_that_disagree_with_eager_and_restores_scratch(codec):
    from tts_engine.runtime.codec_runner import _Graph

    runner = CodecRunner(codec, max_streams=3, buckets=(1, 2))
    runner.decode([0, 2], _codes(5, 6, batch=2))
    before = [_snapshot(runner, slot) for slot in range(4)]  # 3 = scratch
    for (t, bucket), error in (((1, 1), 0.0), ((2, 2), 0.5), ((3, 2), float("nan"))):
        slot_ids = torch.full((bucket,), runner.scratch)
        codes = torch.zeros(bucket, 16, t, dtype=torch.long)
        pcm, s16 = torch.zeros(bucket, t * SPF), torch.zeros(bucket, t * SPF, dtype=torch.int16)
        runner.graphs[(t, bucket)] = _Graph(_FakeGraph(runner, slot_ids, codes, pcm, s16, error), slot_ids, codes,
                                            pcm, s16)
    errors = runner.verify_graphs()
    assert errors[(1, 1)] == 0.0 and errors[(2, 2)] == pytest.approx(0.5)
    assert set(runner.graphs) == {(1, 1)}
    assert all(_same(_snapshot(runner, slot), snap) for slot, snap in enumerate(before))


def test_pcm_to_s16_makes_the_hosts_int16_samples():
    """On the device what `engine.audio.to_s16` makes on the host: clamped, scaled, rounded half to even (the
    halves at 0.5 / 32767 and 2.5 / 32767 included), from fp32 and from the bf16 the served codec gives."""
    from tts_engine.engine.audio import to_s16

    gen = torch.Generator().manual_seed(0)
    pcm = torch.cat([torch.rand(4096, generator=gen) * 2.6 - 1.3,
                     torch.tensor([0.0, 1.0, -1.0, 0.5 / 32767, 2.5 / 32767, -1.5 / 32767, 7.0, -7.0])])
    for x in (pcm, pcm.bfloat16()):
        got = pcm_to_s16(x)
        assert got.dtype == torch.int16
        assert got.numpy().tolist() == to_s16(x.float().numpy()).tolist()


@torch.inference_mode()
@pytest.mark.parametrize("graphs", [False, True])
def test_decode_to_s16_is_the_float_decode_converted(codec, graphs):
    """`decode(s16=True)` gives `pcm_to_s16` of what the float decode gives from the same state, eagerly and
    from a graph's own int16 output (a stand-in graph here; tests/gpu replays real ones)."""
    from tts_engine.runtime.codec_runner import _Graph

    floats, ints = (CodecRunner(codec, max_streams=2, buckets=(2,), chunk_sizes=(1, 2)) for _ in range(2))
    if graphs:
        for t in (1, 2):
            slot_ids, codes = torch.full((2,), ints.scratch), torch.zeros(2, 16, t, dtype=torch.long)
            pcm, s16 = torch.zeros(2, t * SPF), torch.zeros(2, t * SPF, dtype=torch.int16)
            ints.graphs[(t, 2)] = _Graph(_FakeGraph(ints, slot_ids, codes, pcm, s16, 0.0), slot_ids, codes, pcm, s16)
        ints.use_graphs = True
    for t, seed in ((1, 1), (2, 2), (3, 3)):  # 3 = two replays
        codes = _codes(t, seed, batch=2)
        want = pcm_to_s16(floats.decode([0, 1], codes))
        got = ints.decode([0, 1], codes, s16=True)
        assert got.dtype == torch.int16 and torch.equal(got, want)


def test_the_served_codec_takes_its_kernel_choices_from_the_options():
    """`served_codec`: precision None is bf16 on CUDA and fp32 on CPU; on CUDA the fast path with the
    options' codec_* kernel choices (FastPathOptions, the one place their defaults live, as
    `use_fused_kernels` with no arguments); the CPU engine's codec stays all-torch."""
    import copy

    from tts_engine.model.codec_blocks import CausalConv1d
    from tts_engine.runtime.codec_runner import served_codec
    from tts_engine.runtime.options import CODEC_WINDOW_MAX, FastPathOptions

    def convs(model):
        return [m for m in model.modules() if isinstance(m, CausalConv1d)]

    cfg = CodecConfig.from_file(CONFIG_DIR / "tiny-speech_tokenizer.config.json")
    codec = random_codec_decoder(cfg).eval()
    cpu, precision = served_codec(copy.deepcopy(codec), False, None, FastPathOptions(codec_window_max=7))
    assert precision == "fp32" and next(cpu.parameters()).dtype == torch.float32
    assert cpu.pre_transformer.fused is None and not cpu.pre_transformer.rope_kv_kernel
    assert not any(m.as_gemm or m.window_gemm_max for m in convs(cpu))
    cuda, precision = served_codec(copy.deepcopy(codec), True, None, FastPathOptions(codec_rope_kv=False))
    assert precision == "bf16" and next(cuda.parameters()).dtype == torch.bfloat16
    assert cuda.pre_transformer.fused is not None and not cuda.pre_transformer.rope_kv_kernel
    assert all(m.window_gemm_max == CODEC_WINDOW_MAX and m.window_kernel for m in convs(cuda))
    tf32, precision = served_codec(copy.deepcopy(codec), True, "tf32",
                                   FastPathOptions(codec_window_max=0, codec_conv_windows=False))
    assert precision == "tf32" and next(tf32.parameters()).dtype == torch.float32
    assert all(m.as_gemm and m.window_gemm_max == 0 and not m.window_kernel for m in convs(tf32))
    assert tf32.pre_transformer.rope_kv_kernel
    plain, _ = served_codec(copy.deepcopy(codec), True, "fp32")
    default = copy.deepcopy(codec).use_fused_kernels()
    for served, fused in zip(convs(plain), convs(default), strict=True):
        assert (served.window_gemm_max, served.window_kernel) == (fused.window_gemm_max, fused.window_kernel)
    assert plain.pre_transformer.rope_kv_kernel == default.pre_transformer.rope_kv_kernel is True
