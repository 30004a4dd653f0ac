"""The fast path equals its references on CPU: ModelRunner (eager, slot KV caches, device sampler)
equals `generate_codes`; the device sampler equals `sampling.py` row by row; the Triton
decode-attention kernel, run by the Triton interpreter, equals `decode_attention_ref`.

Triton reads TRITON_INTERPRET when `@triton.jit` decorates the kernel, i.e. when
`tts_engine.kernels.decode_attention` is first imported. This process has already imported it
(through the runner), so the interpreted checks run in a fresh subprocess with the variable set.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.threads import one_torch_thread
from tts_engine import sampling as ref
from tts_engine.prompt import Layout, VoiceSpec
from tts_engine.reference import GenerationInput, generate_codes
from tts_engine.runtime import sampler as dev
from tts_engine.runtime.options import FastPathOptions
from tts_engine.runtime.runner import ModelRunner
from tts_engine.synthesizer import Synthesizer

REPO = Path(__file__).resolve().parents[2]
FRAMES = 6
V, EOS = 3072, 2150

GREEDY = ref.SamplingParams.greedy()
SAMPLED = ref.SamplingParams(seed=11)
SAMPLED_TOP_P = ref.SamplingParams(seed=12, top_p=0.7, subtalker_top_p=0.8, temperature=1.2)
SAMPLED_NO_TOP_K = ref.SamplingParams(seed=13, top_k=0, subtalker_top_k=0, repetition_penalty=1.3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def synth(tiny_checkpoint) -> Synthesizer:
    return Synthesizer(tiny_checkpoint)


def make_input(synth: Synthesizer, text: str, layout: Layout, params: ref.SamplingParams,
               voice: str = "ryan", frames: int = FRAMES) -> GenerationInput:
    """A request with a forced length of `frames` (EOS masked, as on random-weight checkpoints)."""
    inp = synth.prepare(text, VoiceSpec(voice), layout=layout, params=params)
    return replace(inp, max_frames=frames + 10, forced_frames=frames)


class Driver:
    """Drives a ModelRunner the way the engine does: one slot per request; frame k of a request is
    produced at talker position len(prompt) + k with the prompt's step text; EOS is masked as the
    engine does for random-weight checkpoints."""

    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.requests: dict[int, tuple[GenerationInput, list[torch.Tensor]]] = {}

    def start(self, slot: int, inp: GenerationInput) -> list[torch.Tensor]:
        """Prefill `inp` into `slot`; -> the list its frames [16] are appended to."""
        r = self.runner
        r.start_slot(slot, inp.params, inp.seed, eos_allowed=False)
        r.prefill(slot, r.embed_prompt(list(inp.prompt.text_ids), list(inp.prompt.codec_ids)))
        self.requests[slot] = (inp, [])
        return self.requests[slot][1]

    def step(self, slots: list[int]) -> None:
        frames = [len(self.requests[s][1]) for s in slots]
        prompts = [self.requests[s][0].prompt for s in slots]
        codes = self.runner.frame_step(slots, frames, [len(p) + f for p, f in zip(prompts, frames)],
                                       [p.step_text_id(f) for p, f in zip(prompts, frames)])
        for slot, row in zip(slots, codes.cpu()):
            self.requests[slot][1].append(row)

    def codes(self, slot: int) -> torch.Tensor:
        return torch.stack(self.requests[slot][1])


def new_runner(synth: Synthesizer, **kw) -> ModelRunner:
    return ModelRunner(synth.model, max_slots=8, max_context=128, use_triton=False, use_graphs=False, **kw)


def assert_codes_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not torch.equal(got, want):
        bad = (got != want).any(1).nonzero().flatten().tolist()
        raise AssertionError(f"{what}: codes differ at frames {bad}\ngot  {got[bad[0]].tolist()}\n"
                             f"want {want[bad[0]].tolist()}")


# The interpreted checks of one kernel path against another (here and tests/runtime/test_cp_*.py, test_split_k.py,
# test_draw_prefetch.py): two streams of two frames on a small runner without graphs, their codes compared.
STREAM_SLOTS = (2, 0)


def two_streams(synth: Synthesizer) -> list[GenerationInput]:
    """A sampled streaming request (for slot 2) and a greedy non-streaming one (slot 0), two frames each."""
    return [make_input(synth, "Hi there.", Layout.STREAMING, SAMPLED, frames=2),
            make_input(synth, "Greedy one", Layout.NON_STREAMING, GREEDY, voice="vivian", frames=2)]


def small_driver(synth: Synthesizer, options: FastPathOptions, use_triton: bool = True) -> Driver:
    return Driver(ModelRunner(synth.model, max_slots=4, max_context=32, use_triton=use_triton, use_graphs=False,
                              options=options))


def start_streams(d: Driver, inputs: list[GenerationInput]) -> None:
    for slot, inp in zip(STREAM_SLOTS, inputs, strict=True):
        d.start(slot, inp)


def stream_codes(d: Driver) -> tuple[torch.Tensor, ...]:
    return tuple(d.codes(slot) for slot in STREAM_SLOTS)


def assert_streams_equal(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...], what: str) -> None:
    for slot, g, w in zip(STREAM_SLOTS, got, want, strict=True):
        assert_codes_equal(g, w, f"slot {slot} {what}")


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


# -- device sampler vs sampling.py -----------------------------------------------------------------

# (seed, frame, codebook) whose uniform is within 2**-25 of 1 (found by search): u * total rounds
# up to the total in fp32, the edge case of inverse-CDF sampling.
NEAR_ONE = [(65552721, 0, 0), (86917819, 0, 0), (89915973, 0, 0), (757483, 3, 7), (34055740, 3, 7),
            (72247417, 3, 7)]


def test_device_counter_uniform_is_bit_identical_to_reference():
    g = torch.Generator().manual_seed(0)
    seeds = [0, 1, 2, 2**31 - 1, 2**32, 2**62, 2**63 - 2, 2**63 - 1,
             *torch.randint(0, 2**63 - 1, (40,), generator=g).tolist()]
    frames = [0, 1, 2, 7, 255, 2047, 2**31 - 1]
    triples = [(s, f, c) for s in seeds for f in frames for c in range(16)]
    s, f, c = (torch.tensor(col, dtype=torch.long) for col in zip(*triples))
    got = dev.counter_uniform(s, f, c).tolist()
    want = [ref.counter_uniform(*t) for t in triples]
    bad = [(t, a, b) for t, a, b in zip(triples, got, want) if a != b]
    assert not bad, f"{len(bad)} of {len(triples)} differ, e.g. (seed, frame, codebook, device, reference) {bad[:3]}"
    # The integer codebook form the runner uses gives the same uniforms.
    for cb in (0, 9, 15):
        rows = c == cb
        assert dev.counter_uniform(s[rows], f[rows], cb).tolist() == [w for w, t in zip(want, triples) if t[2] == cb]
    for seed, frame, cb in NEAR_ONE:
        assert 1 - ref.counter_uniform(seed, frame, cb) < 2**-25


def _rows(params: list[tuple[ref.SamplingParams, int]]) -> dev.SamplingRows:
    rows = dev.SamplingRows.empty(len(params), "cpu")
    for i, (p, seed) in enumerate(params):
        rows.set_row(i, p, seed)
    return rows


def _mixed_params() -> list[tuple[ref.SamplingParams, int]]:
    """Per-row settings: greedy and sampled, top-k 0/1/50, top-p 1.0/0.7, penalties, temperatures."""
    out = []
    for i, (do_sample, top_k, top_p, penalty, temperature) in enumerate([
        (False, 50, 1.0, 1.05, 0.9), (True, 50, 1.0, 1.05, 0.9), (True, 0, 1.0, 1.0, 1.0),
        (True, 1, 1.0, 1.05, 0.9), (True, 50, 0.7, 1.05, 0.9), (True, 0, 0.7, 1.3, 0.5),
        (False, 0, 0.7, 1.3, 1.5), (True, 50, 0.7, 0.8, 1.3), (True, 2048, 0.95, 1.1, 0.7),
        (True, 50, 1.0, 1.05, 0.9), (True, 0, 1.0, 1.0, 0.9), (True, 50, 1.0, 1.0, 0.9),
    ]):
        p = ref.SamplingParams(do_sample=do_sample, top_k=top_k, top_p=top_p, repetition_penalty=penalty,
                               temperature=temperature, subtalker_dosample=do_sample, subtalker_top_k=top_k,
                               subtalker_top_p=top_p, subtalker_temperature=temperature, min_new_tokens=2 + i % 3)
        out.append((p, 1000 + 7919 * i))
    return out


def test_device_codebook0_sampling_equals_reference_row_by_row():
    params = _mixed_params()
    near = [(ref.SamplingParams(top_k=k), seed) for seed, _, cb in NEAR_ONE if cb == 0 for k in (50, 0)]
    params += near
    b = len(params)
    g = torch.Generator().manual_seed(1)
    suppress = ref.suppress_mask(V, EOS)
    frames = [(3 * i) % 7 for i in range(len(params) - len(near))] + [0] * len(near)
    histories = [torch.randint(0, 2048, (f,), generator=g).tolist() for f in frames]
    # Penalised ids near the top so the penalty changes the outcome.
    logits = torch.randn(b, V, generator=g) * 3
    for i, h in enumerate(histories):
        logits[i, h] += 4.0
    logits[:, EOS] = 30.0  # EOS wins wherever it is not masked
    seen = torch.zeros(b, V, dtype=torch.bool)
    for i, h in enumerate(histories):
        seen[i, h] = True
    eos_allowed = torch.tensor([i % 4 != 1 for i in range(b)])
    got = dev.sample_codebook0(logits, seen, torch.tensor(frames), _rows(params), EOS, suppress, eos_allowed)
    for i, ((p, seed), frame, hist) in enumerate(zip(params, frames, histories)):
        row = logits[i].clone()
        if not eos_allowed[i]:
            row[EOS] = -math.inf
        want = ref.pick_codebook0(row, hist, frame, p, seed, EOS, suppress)
        assert int(got[i]) == want, f"row {i} ({p}, seed {seed}, frame {frame}): device {int(got[i])} != {want}"
        assert int(got[i]) < 2048 or int(got[i]) == EOS, f"row {i}: suppressed id {int(got[i])}"
    assert any(int(x) == EOS for x in got) and any(int(x) != EOS for x in got)


@pytest.mark.parametrize("codebook", [1, 7, 15])
def test_device_codebook_sampling_equals_reference_row_by_row(codebook):
    near = [(seed, frame) for seed, frame, cb in NEAR_ONE if cb == 7]
    params = _mixed_params() + [(ref.SamplingParams(), seed) for seed, _ in near]
    b = len(params)
    g = torch.Generator().manual_seed(codebook)
    logits = torch.randn(b, 2048, generator=g) * 2
    frames = torch.tensor([(5 * i) % 11 for i in range(b - len(near))] + [f for _, f in near])
    got = dev.sample_codebook(logits, frames, codebook, _rows(params))
    for i, (p, seed) in enumerate(params):
        want = ref.pick_codebook(logits[i], int(frames[i]), codebook, p, seed)
        assert int(got[i]) == want, f"row {i} ({p}, seed {seed}): device {int(got[i])} != {want}"


def test_device_pick_with_uniform_near_one_lands_on_the_last_unfiltered_id():
    """u * total rounds up to the total: the reference steps back to the last kept id."""
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(3, 2048, generator=g)
    scores[0, 1000:] = -math.inf
    scores[1] = ref.warp(scores[1], 0.9, 50, 1.0)
    scores[2, 2047] = -math.inf
    u = torch.tensor([1 - 2.0**-40, 1 - 2.0**-30, 1 - 2.0**-53], dtype=torch.float64)
    got = dev.pick(scores, u).tolist()
    want = [ref.pick(scores[i], float(u[i])) for i in range(3)]
    assert got == want
    assert all(scores[i, got[i]] > -math.inf for i in range(3))


# -- Triton decode attention, interpreted -------------------------------------------------------

def _run_interpreted(call: str, timeout: float = 240, module: str = "tests.runtime.test_fast_path") -> None:
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"triton is not importable ({exc}); the Triton kernel tests need it on CPU too, "
                    "through its interpreter: pip install 'triton>=3.1' (see the test extra)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    code = f"import {module} as t; t.{call}"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"interpreted check failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    assert "OK" in proc.stdout, proc.stdout


def _assert_interpreted() -> None:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from tts_engine.kernels import decode_attention as da

    kernels = [v for v in vars(da).values() if isinstance(v, JITFunction | InterpretedFunction)]
    assert kernels, "tts_engine.kernels.decode_attention defines no Triton kernel (is triton importable?)"
    assert all(isinstance(k, InterpretedFunction) for k in kernels), \
        "the kernels are compiled, not interpreted: TRITON_INTERPRET=1 was not set when they were defined"


def _poison_allocations() -> None:
    """From now on torch.empty / torch.empty_like return NaN-filled floats, so any output element
    (or partial result) a kernel fails to write shows up."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t: torch.Tensor) -> torch.Tensor:
        return t.fill_(math.nan) if t.is_floating_point() else t

    torch.empty = lambda *a, **k: poison(empty(*a, **k))
    torch.empty_like = lambda *a, **k: poison(empty_like(*a, **k))


# (Hq, Hkv, D, L, rows, lengths): GQA groups 1/2/4, head dims 16/64/128, lengths across the
# 32-key block boundaries, rows read by several queries.
ATTENTION_CASES = [
    (3, 3, 16, 37, [3, 3, 0], [1, 37, 20]),
    (4, 2, 64, 65, [4, 1, 4, 0, 4], [64, 65, 33, 2, 1]),
    (8, 2, 128, 70, [2, 2, 2, 1], [70, 31, 32, 33]),
    (4, 1, 16, 40, [i % 3 for i in range(40)], list(range(1, 41))),  # every length 1..L
]


def check_kernel_interpreted() -> None:
    """Runs in the subprocess: kernel == reference, and it writes every output element."""
    torch.set_num_threads(1)
    _assert_interpreted()
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
    _assert_interpreted()
    from tts_engine.runtime import code_predictor
    from tts_engine.runtime import runner as runner_module

    # The interpreter's cost is per program: wide blocks keep the tiny model's GEMVs to a few
    # programs (block_k 16 < its 32-64 wide rows: the norm prologue and the products over several slices).
    wide = {name: dict(block_n=64, block_k=16) for name in ("qkv", "o", "gate_up", "down", "head")}
    code_predictor.GEMV_LAUNCH = wide
    # the tensor-core kernel as the code predictor's passes launch it (o's and down's residual read early)
    code_predictor.MMA_LAUNCH = {name: dict(mma=True, block_n=64, block_k=16, residual_early=name in ("o", "down"))
                                 for name in wide}
    runner_module.TALKER_GEMV_LAUNCH = wide
    runner_module.PREFILL_MMA_LAUNCH = {name: dict(mma=True, block_n=64, block_k=16) for name in wide}
    from tts_engine.runtime import prefill as prefill_module

    prefill_rows = []  # the prompts prefilled on the tensor-core products, by their rows
    gemv_step = prefill_module.decoder_step_gemv
    prefill_module.decoder_step_gemv = lambda *a, **k: prefill_rows.append(a[1].shape[0]) or gemv_step(*a, **k)
    fused_attention = []  # the talker steps' positions where kernels/talker_attention.py ran
    qk_attention = runner_module.decode_qk_attention
    runner_module.decode_qk_attention = lambda *a, **k: fused_attention.append(a[5].tolist()) or qk_attention(*a, **k)
    synth = Synthesizer(checkpoint)
    inputs = two_streams(synth)
    results = []
    # torch; Triton with the products on cuBLAS; with the talker's and code predictor's fused GEMVs and
    # the talker's tensor-core attention (version 3; one runner for all keeps this test's time down), its
    # first step's in one launch with the q/k norm (kernels/talker_attention.py: its context is the longest
    # prompt + 1), the second's split; with the code predictor's fusions and the talker's prefill products
    # on the tensor-core kernel, the code predictor's q/k norm + RoPE a launch of its own (the others: fused
    # into its attention)
    cublas = FastPathOptions(talker_gemv_rows=0, cp_gemv_rows=0, attention_version=2)
    first_step = [len(inputs[0].prompt), len(inputs[1].prompt)]
    variants = (cublas, cublas, FastPathOptions(talker_gemv_rows=2, cp_gemv_rows=4, attention_version=3,
                                                talker_qk_attention_context=max(first_step) + 1),
                replace(cublas, cp_mma_rows=4, cp_fused_attention=False, prefill_mma_rows=64))
    for i, options in enumerate(variants):
        d = small_driver(synth, options, use_triton=i > 0)
        start_streams(d, inputs)
        r = d.runner
        prefilled = (r.hidden[[2, 0]].clone(), r.logits[[2, 0]].clone(), r.k_cache[:, [2, 0]].clone(),
                     r.v_cache[:, [2, 0]].clone())
        for _ in range(2):
            d.step([2, 0])
        results.append((stream_codes(d), r.hidden[[2, 0]].clone(), r.logits[[2, 0]].clone(), prefilled))
        assert prefill_rows == ([len(inputs[0].prompt), len(inputs[1].prompt)] if options.prefill_mma_rows else [])
        prefill_rows.clear()
        layers = len(r.talker.layers)
        fuses = options.talker_gemv_rows >= 2 and options.talker_qk_attention_context  # 2 rows a step here
        assert fused_attention == ([first_step] * layers if fuses else []), \
            "the fused attention ran at other steps than the first"
        fused_attention.clear()
    (a_codes, ah, al, a_prefilled) = results[0]
    names = ("Triton", "Triton + GEMVs + attention v3 (the first step's fused with its q/k norm)",
             "Triton + tensor-core kernel (code predictor, prefill), CP attention unfused")
    for what, (b_codes, bh, bl, b_prefilled) in zip(names, results[1:], strict=True):
        for name, b, a in zip(("hidden", "logits", "keys", "values"), b_prefilled, a_prefilled, strict=True):
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4,
                                       msg=lambda m, n=f"{what}, prefill {name}": f"{n}: {m}")
        assert_streams_equal(b_codes, a_codes, f"with {what}")
        torch.testing.assert_close(bh, ah, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(bl, al, atol=1e-4, rtol=1e-4)
    print("OK")


def test_triton_decode_attention_interpreted_equals_reference():
    _run_interpreted("check_kernel_interpreted()")


def test_runner_with_triton_attention_equals_torch_attention(tiny_checkpoint):
    _run_interpreted(f"check_runner_triton_interpreted({str(tiny_checkpoint)!r})", timeout=480)
