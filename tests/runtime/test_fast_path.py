"""The fast path equals its references on CPU: ModelRunner (eager, slot KV caches, device sampler)
equals `generate_codes`; the Triton decode-attention kernel, run by the Triton interpreter (in a subprocess:
tests/runtime/driver.py says why), equals `decode_attention_ref`, and the runner with it and the other Triton paths
equals the torch runner. (The device sampler against `sampling.py`: tests/runtime/test_device_sampler.py.)"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tests.runtime.driver import (
    FRAMES,
    GREEDY,
    SAMPLED,
    SAMPLED_NO_TOP_K,
    SAMPLED_TOP_P,
    Driver,
    assert_codes_equal,
    assert_interpreted,
    assert_streams_equal,
    make_input,
    new_runner,
    run_interpreted,
    small_driver,
    start_streams,
    stream_codes,
    two_streams,
)
from tests.threads import one_torch_thread
from tts_engine.prompt import Layout
from tts_engine.reference import generate_codes
from tts_engine.runtime.options import FastPathOptions
from tts_engine.synthesizer import Synthesizer


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def synth(tiny_checkpoint) -> Synthesizer:
    return Synthesizer(tiny_checkpoint)


# -- runner vs reference loop ------------------------------------------------------------------

BATCH_PARAMS = {
    "greedy": (GREEDY, GREEDY, GREEDY),
    "sampled": (SAMPLED, replace(SAMPLED, seed=2**63 - 1), SAMPLED_TOP_P),
    "mixed": (GREEDY, SAMPLED_TOP_P, SAMPLED_NO_TOP_K),
}


@pytest.mark.parametrize("mode", BATCH_PARAMS)
def test_runner_batch_of_three_equals_reference_batch(synth, mode):
    p = BATCH_PARAMS[mode]
    inputs = [make_input(synth, "Hello there.", Layout.STREAMING, p[0]),
              make_input(synth, "A somewhat longer second sentence", Layout.NON_STREAMING, p[1], voice="vivian"),
              make_input(synth, "Third, streamed!", Layout.STREAMING, p[2], voice="eric")]
    want = generate_codes(synth.model, inputs)
    d = Driver(new_runner(synth))
    slots = [5, 0, 2]
    for slot, inp in zip(slots, inputs):
        d.start(slot, inp)
    for _ in range(FRAMES):
        d.step(slots)
    for i, slot in enumerate(slots):
        assert_codes_equal(d.codes(slot), want[i], f"request {i} in slot {slot}")
    # The three requests really are different (the comparison above is not trivially satisfied).
    assert not torch.equal(want[0], want[2])


def test_requests_joining_at_different_steps_each_get_their_reference_codes(synth):
    # A strong repetition penalty: a slot that kept its last request's history would change c.
    a = make_input(synth, "First request, streamed.", Layout.STREAMING, replace(SAMPLED, repetition_penalty=2.0))
    b = make_input(synth, "Second one arrives later", Layout.NON_STREAMING, SAMPLED_TOP_P, voice="serena")
    c = a  # the same request again, in a's slot: must give a's codes
    d = Driver(new_runner(synth))
    out_a = d.start(3, a)
    d.step([3])
    d.step([3])
    out_b = d.start(1, b)  # joins while a is at frame 2: rows of one step are at different frames
    for _ in range(FRAMES - 2):
        d.step([3, 1])
    out_c = d.start(3, c)  # a is done; c reuses its slot (cache, repetition history, settings reset)
    for _ in range(2):
        d.step([1, 3])
    for _ in range(FRAMES - 2):
        d.step([3])
    for name, out, inp in (("a", out_a, a), ("b", out_b, b), ("c", out_c, c)):
        assert_codes_equal(torch.stack(out), generate_codes(synth.model, [inp])[0], f"request {name}")


def test_seeded_request_codes_do_not_depend_on_batch_position(synth):
    x = make_input(synth, "Position independent.", Layout.STREAMING, replace(SAMPLED, seed=2**62 + 5))
    alone = Driver(new_runner(synth))
    alone.start(0, x)
    for _ in range(FRAMES):
        alone.step([0])

    others = [make_input(synth, t, lay, p, voice=v) for t, lay, p, v in (
        ("Somebody else entirely", Layout.NON_STREAMING, SAMPLED, "dylan"),
        ("Another neighbour.", Layout.STREAMING, SAMPLED_TOP_P, "sohee"),
        ("And a greedy one", Layout.STREAMING, GREEDY, "eric"))]
    crowd = Driver(new_runner(synth))
    for slot, inp in enumerate(others):
        crowd.start(slot, inp)
    crowd.step([0, 1, 2])  # the neighbours are one frame ahead
    crowd.start(3, x)
    for _ in range(FRAMES - 1):
        crowd.step([2, 3, 0, 1])
    crowd.step([3])
    assert_codes_equal(crowd.codes(3), alone.codes(0), "slot 3 amid others vs slot 0 alone")


# -- Triton decode attention, interpreted -------------------------------------------------------

def _poison_allocations() -> None:
    """From now on torch.empty / torch.empty_like return NaN-filled floats, so any output element
    (or partial result) a kernel fails to write shows up."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t: torch.Tensor) -> torch.Tensor:
        return t.fill_(math.nan) if t.is_floating_point() else t

    torch.empty = lambda *a, **k: poison(empty(*a, **k))
    torch.empty_like = lambda *a, **k: poison(empty_like(*a, **k))


# (Hq, Hkv, D, L, rows, lengths): GQA groups 1/2/4, head dims 16/64/128, lengths across the
# key-block boundaries (64 keys a block), rows read by several queries.
ATTENTION_CASES = [
    (3, 3, 16, 37, [3, 3, 0], [1, 37, 20]),
    (4, 2, 64, 65, [4, 1, 4, 0, 4], [64, 65, 33, 2, 1]),
    (8, 2, 128, 70, [2, 2, 2, 1], [70, 31, 32, 33]),
    (4, 1, 16, 40, [i % 3 for i in range(40)], list(range(1, 41))),  # every length 1..L
]


def check_kernel_interpreted() -> None:
    """Runs in the subprocess: kernel == reference, and it writes every output element."""
    torch.set_num_threads(1)
    assert_interpreted()
    _poison_allocations()
    from tts_engine.kernels import decode_attention as da

    g = torch.Generator().manual_seed(0)
    for hq, hkv, d, max_len, rows, lengths in ATTENTION_CASES:
        n = max(rows) + 2
        # Cache rows as one layer of a layer stack, queries as a strided view (the runner's shapes).
        k_all = torch.randn(2, n, hkv, max_len, d, generator=g)
        v_all = torch.randn(2, n, hkv, max_len, d, generator=g)
        rows_t, lengths_t = torch.tensor(rows), torch.tensor(lengths)
        for r in range(n):
            valid = max((n_ for r_, n_ in zip(rows, lengths) if r_ == r), default=0)
            k_all[1, r, :, valid:] = 1e4  # keys past every reader's length must not be read
            v_all[1, r, :, valid:] = -1e4
        k, v = k_all[1], v_all[1]
        q = torch.randn(len(rows), hq, 2 * d, generator=g)[:, :, :d]
        want = da.decode_attention_ref(q, k, v, rows_t, lengths_t)
        assert torch.isfinite(want).all()
        got = da.decode_attention(q, k, v, rows_t, lengths_t)
        assert torch.isfinite(got).all(), f"{(hq, hkv, d)}: {int((~torch.isfinite(got)).sum())} outputs not written"
        torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5, msg=lambda m, c=(hq, hkv, d): f"{c}: {m}")
    print("OK")


def check_runner_triton_interpreted(checkpoint: str) -> None:
    """Runs in the subprocess: two frames with the Triton kernel == two frames with the torch one."""
    torch.set_num_threads(1)
    assert_interpreted()
    from tts_engine.runtime import code_predictor
    from tts_engine.runtime import runner as runner_module

    # The interpreter's cost is per program: wide blocks keep the tiny model's GEMVs to a few
    # programs (block_k 16 < its 32-64 wide rows: the norm prologue and the products over several slices).
    wide = {name: dict(block_n=64, block_k=16) for name in ("qkv", "o", "gate_up", "down", "head")}
    code_predictor.GEMV_LAUNCH = wide
    runner_module.TALKER_GEMV_LAUNCH = wide
    fused_attention = []  # the talker steps' positions where kernels/talker_attention.py ran
    qk_attention = runner_module.decode_qk_attention
    runner_module.decode_qk_attention = lambda *a, **k: fused_attention.append(a[5].tolist()) or qk_attention(*a, **k)
    synth = Synthesizer(checkpoint)
    inputs = two_streams(synth)
    results = []
    # torch; Triton with the products on cuBLAS; with the talker's and code predictor's fused GEMVs (one
    # runner for all keeps this test's time down), the talker's first step's attention in one launch with
    # the q/k norm (kernels/talker_attention.py: its context is the longest prompt + 1), the second's split;
    # on cuBLAS with the code predictor's q/k norm + RoPE a launch of its own (the others: fused into its
    # attention)
    cublas = FastPathOptions(talker_gemv_rows=0, cp_gemv_rows=0)
    first_step = [len(inputs[0].prompt), len(inputs[1].prompt)]
    variants = (cublas, cublas, FastPathOptions(talker_gemv_rows=2, cp_gemv_rows=4,
                                                talker_qk_attention_context=max(first_step) + 1),
                replace(cublas, cp_fused_attention=False))
    for i, options in enumerate(variants):
        d = small_driver(synth, options, use_triton=i > 0)
        start_streams(d, inputs)
        r = d.runner
        prefilled = (r.hidden[[2, 0]].clone(), r.logits[[2, 0]].clone(), r.k_cache[:, [2, 0]].clone(),
                     r.v_cache[:, [2, 0]].clone())
        for _ in range(2):
            d.step([2, 0])
        results.append((stream_codes(d), r.hidden[[2, 0]].clone(), r.logits[[2, 0]].clone(), prefilled))
        layers = len(r.talker.layers)
        fuses = options.talker_gemv_rows >= 2 and options.talker_qk_attention_context  # 2 rows a step here
        assert fused_attention == ([first_step] * layers if fuses else []), \
            "the fused attention ran at other steps than the first"
        fused_attention.clear()
    (a_codes, ah, al, a_prefilled) = results[0]
    names = ("Triton", "Triton + GEMVs (the first step's attention fused with its q/k norm)",
             "Triton, CP attention unfused")
    for what, (b_codes, bh, bl, b_prefilled) in zip(names, results[1:], strict=True):
        for name, b, a in zip(("hidden", "logits", "keys", "values"), b_prefilled, a_prefilled, strict=True):
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4,
                                       msg=lambda m, n=f"{what}, prefill {name}": f"{n}: {m}")
        assert_streams_equal(b_codes, a_codes, f"with {what}")
        torch.testing.assert_close(bh, ah, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(bl, al, atol=1e-4, rtol=1e-4)
    print("OK")


def test_triton_decode_attention_interpreted_equals_reference():
    run_interpreted("check_kernel_interpreted()", module=__name__)


def test_runner_with_triton_attention_equals_torch_attention(tiny_checkpoint):
    run_interpreted(f"check_runner_triton_interpreted({str(tiny_checkpoint)!r})", timeout=900, module=__name__)


def test_more_slots_than_the_largest_bucket_make_a_bucket_of_their_own(synth):
    """`max_active_streams` past the bucket list (64): a step of every slot runs, each row its reference codes
    (a batch past the list's last bucket was refused with "exceeds the largest bucket")."""
    from tts_engine.runtime.runner import BUCKETS, ModelRunner

    slots = max(BUCKETS) + 3
    runner = ModelRunner(synth.model, max_slots=slots, max_context=32, use_triton=False, use_graphs=False)
    assert runner.buckets == (*(b for b in BUCKETS if b < slots), slots)
    assert new_runner(synth).buckets == (1, 2, 4, 8)  # 8 slots: the buckets up to them, as before
    inputs = [make_input(synth, "Hi there.", Layout.STREAMING, GREEDY, frames=2),
              make_input(synth, "Greedy one", Layout.STREAMING, GREEDY, voice="vivian", frames=2)]
    d = Driver(runner)
    rows = list(range(slots))
    for slot in rows:
        d.start(slot, inputs[slot % 2])
    for _ in range(2):
        d.step(rows)
    want = generate_codes(synth.model, inputs)
    for slot in (0, 1, slots - 1):
        assert_codes_equal(d.codes(slot), want[slot % 2][:2], f"slot {slot}")
