"""The one-row tensor-core products (kernels/cuda/cp_gemv.cu through kernels/cp_gemv.py) on an sm90 GPU: each of the
code predictor's products with its fusions against `gemv_ref` and bit for bit (but for rare one-ulp roundings) against
the Triton whole-row GEMV they stand in for; the fixed-point sum they read; the calls they do not take; a PDL chain of
them in a graph; and in the runner's batch-1 passes, the steps against the torch path and frames that replay bit for
bit. The runners: tests/gpu/conftest.py."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.replays import assert_pdl_gives_the_output_without, graph_replays, rel_err
from tests.gpu.test_code_predictor_gpu import _compare_code_predictor_steps, code_predictors_32
from tts_engine.kernels.backend import FIXED_ONE, PDL_EARLY
from tts_engine.kernels.cp_gemv import CpGemv, rows_fit
from tts_engine.kernels.gemv import gemv, gemv_ref

WHOLE = dict(whole_rows=True, block_n=4, num_warps=4)


@pytest.fixture(scope="module")
def products(cuda):
    return CpGemv(cuda)


def _bf16(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g, device="cuda") * scale).bfloat16()


def _fixed(g, *shape):  # an attention + o sum: int64 multiples of 2^-32 of values ~N(0, 1)
    return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.float64) * FIXED_ONE).to(torch.int64)


def _check(got, want, triton, what):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    assert rel_err(got, want) < 1e-2, f"{what}: against the reference"
    same = (got == triton).float().mean().item()
    assert same > 0.98, f"{what}: {same:.3%} of the outputs equal the Triton kernel's"


@pytest.mark.parametrize("case", ["qkv", "head", "gate_up", "gate_up_delta", "down", "down_delta", "o"])
def test_products_are_the_triton_gemvs(products, case):
    g = torch.Generator(device="cuda").manual_seed(len(case))
    n, k = {"qkv": (4096, 1024), "head": (2048, 1024), "gate_up": (6144, 1024), "gate_up_delta": (6144, 1024),
            "down": (1024, 3072), "down_delta": (1024, 3072), "o": (1024, 2048)}[case]
    x, w = _bf16(g, 1, k), _bf16(g, n, k, scale=k ** -0.5)
    kw: dict = {}
    if case in ("qkv", "head") or case.startswith("gate_up"):
        kw["norm"] = (_bf16(g, k, scale=0.2) + 1, 1e-6)
    if case.startswith("gate_up"):
        kw["silu_mul"] = True
    if case == "gate_up_delta":
        kw["x_delta"] = _fixed(g, 2, k)
    if case.startswith("down") or case == "o":
        kw["residual"] = _bf16(g, 1, n)
    if case == "down_delta":
        kw["residual_delta"] = _fixed(g, 2, n)
    before = products.launches
    kept = {name: t.clone() for name, t in kw.items() if name.endswith("delta")}
    want = gemv_ref(x, w, **{**kw, **{name: t.clone() for name, t in kept.items()}})  # zeroes a residual's delta
    triton = gemv(x, w, **{**kw, **{name: t.clone() for name, t in kept.items()}}, **WHOLE)
    got = products(x, w, **kw)
    torch.cuda.synchronize()
    assert products.launches == before + 1, "the CUDA kernel computed it"
    _check(got, want, triton, case)
    if "residual_delta" in kw:
        d = kw["residual_delta"]
        assert not d[0].any() and torch.equal(d[1], kept["residual_delta"][1]), "row 0's delta zeroed once read"
    if "x_delta" in kw:
        assert torch.equal(kw["x_delta"], kept["x_delta"]), "x's delta is read, not changed"


def test_residual_read_before_or_after_the_wait_is_the_same(products):
    g = torch.Generator(device="cuda").manual_seed(5)
    x, w, r = _bf16(g, 1, 3072), _bf16(g, 1024, 3072, scale=3072 ** -0.5), _bf16(g, 1, 1024)
    d = _fixed(g, 1, 1024)
    late = products(x, w, residual=r, residual_delta=d.clone())
    early = products(x, w, residual=r, residual_delta=d.clone(), residual_early=True)
    assert torch.equal(late, early)


def test_calls_it_does_not_take_go_to_the_triton_gemv(products):
    g = torch.Generator(device="cuda").manual_seed(6)
    w, ln = _bf16(g, 1024, 1024, scale=1 / 32), _bf16(g, 1024) + 1
    refused = {"two rows with x's delta": (_bf16(g, 2, 1024), w, {"x_delta": _fixed(g, 2, 1024)}),
               "fp32": (_bf16(g, 1, 1024).float(), w.float(), {}),
               "K not whole warps": (_bf16(g, 1, 1000), _bf16(g, 1024, 1000), {}),
               "N not 16 rows": (_bf16(g, 1, 1024), w[:1000], {})}
    for what, (x, ww, kw) in refused.items():
        assert not products.takes(x, ww, **kw), what
        before = products.launches
        got = products(x, ww, **kw, **WHOLE)
        assert products.launches == before, what
        assert rel_err(got, gemv_ref(x, ww, **kw)) < 1e-2, what
    x = _bf16(g, 1, 1024)
    assert products.takes(x, w, norm=(ln, 1e-6))
    assert not products.takes(x, w, norm=(ln, 1e-6), residual=_bf16(g, 1, 1024)), "a norm with a residual"
    assert not products.takes(x, w, residual=_bf16(g, 1, 1024), x_delta=_fixed(g, 1, 1024)), "x's delta, mode 1"
    assert not products.takes(_bf16(g, 65, 1024), w), "more than 64 rows"


def test_a_pdl_chain_in_a_graph_is_the_chain_without(products):
    """qkv-like -> gate/up -> down with PDL (early triggers where the passes take them) captured in a graph and
    replayed with two inputs in turn: each replay is its input's result launched without PDL, eagerly."""
    g = torch.Generator(device="cuda").manual_seed(7)
    w1, w2, w3 = _bf16(g, 1024, 1024, scale=1 / 32), _bf16(g, 6144, 1024, scale=1 / 32), _bf16(g, 1024, 3072,
                                                                                                   scale=3072 ** -0.5)
    ln1, ln2 = _bf16(g, 1024, scale=0.2) + 1, _bf16(g, 1024, scale=0.2) + 1
    x = _bf16(g, 1, 1024)
    inputs = (x.clone(), _bf16(g, 1, 1024))
    delta = torch.zeros(1, 1024, dtype=torch.int64, device="cuda")

    def chain(pdl):
        h = products(x, w1, norm=(ln1, 1e-6), pdl=PDL_EARLY if pdl else False)
        delta.copy_((h.double() * FIXED_ONE).to(torch.int64))  # as attention + o writes its sum
        act = products(h, w2, norm=(ln2, 1e-6), silu_mul=True, x_delta=delta, pdl=pdl)
        return products(act, w3, residual=h, residual_delta=delta, pdl=PDL_EARLY if pdl else False,
                        residual_early=pdl)

    want = []
    with torch.inference_mode():
        for inp in inputs:
            x.copy_(inp)
            want.append(chain(False).clone())
        replays = graph_replays(lambda: chain(True), n=6, before=lambda i: x.copy_(inputs[i % 2]))
    assert not torch.equal(want[0], want[1])
    for i, got in enumerate(replays):
        assert torch.equal(got, want[i % 2]), f"replay {i}"


def test_batch_1_steps_with_the_cuda_products_equal_torch(runners, products):
    """The runner's batch-1 passes (a 2-position prefill on the Triton GEMVs, then one-position passes and the heads on
    the CUDA products) against the torch path, as tests/gpu/test_code_predictor_gpu.py compares the Triton passes."""
    cfg, (fast, ref) = runners
    cp = fast.code_predictor
    was, before = cp.gemv_kernel, products.launches
    cp.gemv_kernel = products
    try:
        assert cp.product(1) is products and cp.product(2) is None
        _compare_code_predictor_steps(cp, ref.code_predictor, 1, cfg.talker.code_predictor.hidden_size)
    finally:
        cp.gemv_kernel = was
    # the prefill's head, then two one-position passes of 15 products (qkv launched: no table here) and their heads
    assert products.launches - before == 1 + 2 * 16, "the one-row products are the CUDA kernel's"


@pytest.mark.parametrize("sampled", [True, False])
def test_frames_with_the_cuda_products_replay_bit_for_bit(runners, products, sampled):
    """Whole batch-1 frames (PDL passes, early triggers, the CUDA draw where it runs) on the CUDA products, captured in
    a graph, inputs alternating between two: every replay gives its input's codes, and the sum of attention + o is
    zero between frames. (Their codes are not compared with the Triton GEMVs' frames: a one-ulp rounding of a logit may
    change a pick, and every later pass follows it.)"""
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
    g = torch.Generator(device="cuda").manual_seed(11)
    hidden = _bf16(g, 1, cfg.talker.hidden_size)
    inputs = (hidden.clone(), _bf16(g, 1, cfg.talker.hidden_size))
    c0, frames = torch.tensor([37], device="cuda"), torch.tensor([3], device="cuda")
    rows = fast.rows.gather(torch.zeros(1, dtype=torch.long, device="cuda"))
    rows.sub_do_sample.fill_(sampled)
    rows.sub_temperature.fill_(0.9)
    rows.sub_top_k.fill_(50)
    rows.sub_top_p.fill_(1.0)
    outs, was, before = {}, cp.gemv_kernel, products.launches
    with torch.inference_mode():
        try:
            for name, k in (("triton", None), ("cuda", products)):
                cp.gemv_kernel = k
                outs[name] = graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL), n=6,
                                           before=lambda i: hidden.copy_(inputs[i % 2]))
                assert not cp.o_sum.any(), f"{name}: the attention + o sum is not zero after the frames"
        finally:
            cp.gemv_kernel = was
    # a frame: the prefill's head, then 14 passes of 14 products (the first qkv from the table) and a head; run once
    # before its capture and once captured
    assert products.launches - before == 2 * (14 * 15 + 1), "the frames' products are the CUDA kernel's"
    for name, replays in outs.items():
        differ = [i for i, got in enumerate(replays) if not torch.equal(got, replays[i % 2])]
        assert not differ, f"{name}: replays {differ} differ from their input's first"
    assert not torch.equal(outs["cuda"][0], outs["cuda"][1]), "two inputs, one frame of codes"


@pytest.mark.parametrize("m", [2, 8, 13, 32])
@pytest.mark.parametrize("case", ["qkv", "gate_up", "down", "o"])
def test_rows_are_the_products_of_cublas(products, m, case):
    """2-32 rows of x (`cp_gemm_rows`, the passes' products; 64 in the partials' test below): plain, and gate/up with
    SwiGLU, against the reference (cuBLAS' product, torch's SiLU-mul), rows past a tile's end not read."""
    g = torch.Generator(device="cuda").manual_seed(m)
    n, k = {"qkv": (4096, 1024), "gate_up": (6144, 1024), "down": (1024, 3072), "o": (1024, 2048)}[case]
    x = _bf16(g, m + 3, k)[:m]  # rows past m are there, and must not be read into the products
    w = _bf16(g, n, k, scale=k ** -0.5)
    silu = case == "gate_up"
    assert products.takes(x, w, silu_mul=silu)
    before = products.launches
    got = products(x, w, silu_mul=silu)
    assert products.launches == before + 1
    want = gemv_ref(x, w, silu_mul=silu)
    assert got.shape == want.shape and rel_err(got, want) < 1e-2, case
    same = (got == want).float().mean().item()
    assert same > 0.95, f"{case}, {m} rows: {same:.3%} of the outputs equal the reference's"
    ones = torch.ones(k, device="cuda", dtype=torch.bfloat16)
    assert not products.takes(x, w, norm=(ones, 1e-6), partials=True), "a norm takes whole rows, not partials"
    assert not products.takes(_bf16(g, 65, k), w), "at most 64 rows"


@pytest.mark.parametrize("m", [2, 3, 16, 32, 64])
@pytest.mark.parametrize("case", ["qkv", "gate_up", "head"])
def test_rows_normalise_x_as_the_norm_launch_does(products, m, case):
    """The rows with the norm in their prologue (qkv, gate/up with SwiGLU, the heads; x strided, as the head's last
    position of a prefill is): against the reference, against the norm launch then the same product, and with w an
    identity (the products then are the normalised x itself) against `rms_norm_ref` within an ulp."""
    from tts_engine.kernels.rms_norm import rms_norm, rms_norm_ref

    g = torch.Generator(device="cuda").manual_seed(m + len(case))
    n, k = {"qkv": (4096, 1024), "gate_up": (6144, 1024), "head": (2048, 1024)}[case]
    x = _bf16(g, m, 2, k, scale=3.0)[:, 1]
    w, ln = _bf16(g, n, k, scale=k ** -0.5), _bf16(g, k, scale=0.2) + 1
    silu, norm = case == "gate_up", (ln, 1e-6)
    assert products.takes(x, w, norm=norm, silu_mul=silu)
    before = products.launches
    got = products(x, w, norm=norm, silu_mul=silu)
    assert products.launches == before + 1
    want = gemv_ref(x, w, norm=norm, silu_mul=silu)
    assert got.shape == want.shape and rel_err(got, want) < 1e-2, case
    unfused = products(rms_norm(x, ln, 1e-6), w, silu_mul=silu)
    same = (got == unfused).float().mean().item()
    assert same > 0.97, f"{case}, {m} rows: {same:.3%} of the outputs equal the norm launch's then the product's"
    if case == "qkv":  # y's first k features are the normalised x (exact sums: one product of 1.0 each)
        eye = torch.cat((torch.eye(k, device="cuda"), torch.zeros(n - k, k, device="cuda"))).bfloat16()
        normed, ref = products(x, eye, norm=norm)[:, :k].float(), rms_norm_ref(x, ln, 1e-6).float()
        ulp = ref.abs() * 2.0 ** -7
        assert ((normed - ref).abs() <= ulp).all(), "within one bf16 ulp of the reference norm"
        assert (normed == ref).float().mean().item() > 0.99


@pytest.mark.parametrize("m", [2, 3, 16, 32, 64])
@pytest.mark.parametrize("case", ["o", "down", "qkv"])
def test_rows_add_the_residual_as_the_norm_launch_does(products, m, case):
    """The rows with the residual add in their epilogue (o and down in slices of K, a cluster of CTAs a column of w
    whose first adds them up; qkv's K whole): the bits of the residual plus the partials' sum that the norm launch made
    (`add_rms_norm_ref`'s sum), and the same bits again."""
    from tts_engine.kernels.rms_norm import partials_sum_ref

    g = torch.Generator(device="cuda").manual_seed(m + len(case) + 100)
    n, k = {"o": (1024, 2048), "down": (1024, 3072), "qkv": (4096, 1024)}[case]
    x = _bf16(g, m + 3, k)[:m]
    w, r = _bf16(g, n, k, scale=k ** -0.5), _bf16(g, m, n + 8)[:, :n]
    assert products.takes(x, w, residual=r)
    before = products.launches
    got = products(x, w, residual=r)
    torch.cuda.synchronize()
    assert products.launches == before + 1
    parts = products(x, w, partials=True)
    assert parts.dim() == (3 if k > 1024 else 2)
    assert torch.equal(got, r + (partials_sum_ref(parts, r.dtype) if parts.dim() == 3 else parts))
    assert torch.equal(products(x, w, residual=r), got), "a second launch: the same bits"
    assert rel_err(got, gemv_ref(x, w, residual=r)) < 1e-2
    assert not products.takes(x, w, residual=r[:1]), "a residual row a row of x"


@pytest.mark.parametrize("b", [4, 8])
def test_cublas_passes_with_the_cuda_rows_equal_torch(runners, products, b):
    """The runner's cuBLAS passes (4 and 8 token rows, the prefills 8 and 16; the runners hold 8) with their products on
    the CUDA kernel's rows against the torch path."""
    cfg, (fast, ref) = runners
    cp = fast.code_predictor
    was, before = (cp.gemv_kernel, cp.gemv_kernel_rows), products.launches
    cp.gemv_kernel, cp.gemv_kernel_rows = products, 32
    try:
        assert cp.rows_product(b) is products
        _compare_code_predictor_steps(cp, ref.code_predictor, b, cfg.talker.code_predictor.hidden_size)
    finally:
        cp.gemv_kernel, cp.gemv_kernel_rows = was
    assert products.launches > before


@pytest.mark.parametrize("rows_kw,cta_k,blocks", [(256, 1024, (1, 1, 1, 1)), (128, 1024, (1, 1, 1, 1)),
                                                  (256, 512, (1, 2, 4, 4)), (256, 1 << 20, (1, 2, 4, 4))])
@pytest.mark.parametrize("m", [3, 16, 32, 45, 64])
@pytest.mark.parametrize("case", ["down", "o", "qkv", "gate_up"])
def test_rows_split_k_partials_sum_to_the_product(cuda, rows_kw, cta_k, blocks, m, case):
    """The rows kernel's layouts (columns a warp, columns a CTA, blocks of 16 rows of w a CTA sharing one copy of x):
    o's and down's rows as fp32 split-K partials (`partials=True`): each partial is its slice of K's product, their sum
    rounded is the product, and the norm after them sums them as it sums cuBLAS' partials; qkv (whole where a CTA takes
    1,024 columns or more) and gate/up with SwiGLU (always whole) the bf16 product."""
    from tts_engine.kernels.rms_norm import add_rms_norm

    products = CpGemv(cuda, rows_kw=rows_kw, rows_cta_k=cta_k, rows_blocks=blocks)
    g = torch.Generator(device="cuda").manual_seed(m + rows_kw + cta_k % 4096 + sum(blocks))
    n, k = {"qkv": (4096, 1024), "down": (1024, 3072), "o": (1024, 2048), "gate_up": (6144, 1024)}[case]
    x = _bf16(g, m + 3, k)[:m]
    w = _bf16(g, n, k, scale=k ** -0.5)
    silu = case == "gate_up"
    splits = 1 if silu or k % cta_k else k // cta_k
    fits = rows_fit(k, -(-m // 8), splits, rows_kw)  # a whole down or o at 64 rows: x's 3,072 columns do not
    assert products.takes(x, w, partials=True, silu_mul=silu) == fits
    if not fits:
        return
    got = products(x, w, partials=True, silu_mul=silu)
    assert products.launches == 1
    want = gemv_ref(x, w, silu_mul=silu)
    if splits == 1:
        assert got.shape == want.shape and got.dtype == torch.bfloat16
        whole = got
    else:
        assert got.shape == (splits, m, n) and got.dtype == torch.float32
        for s in range(splits):
            cols = slice(s * cta_k, (s + 1) * cta_k)
            assert rel_err(got[s], x[:, cols].float() @ w[:, cols].float().T) < 1e-4, f"slice {s}"
        whole = got.sum(0).bfloat16()
        res, ln = _bf16(g, m, n), _bf16(g, n, scale=0.2) + 1
        summed, normed = add_rms_norm(res, got, ln, 1e-6)
        want_sum, want_norm = add_rms_norm(res, want, ln, 1e-6)
        assert rel_err(summed, want_sum) < 1e-2 and rel_err(normed, want_norm) < 1e-2
    assert rel_err(whole, want) < 1e-2
    same = (whole == want).float().mean().item()
    assert same > 0.95, f"{case}, {m} rows: {same:.3%} of the outputs equal the reference's"


@pytest.fixture(scope="module")
def rows_code_predictors(triton_model, runners):
    """`code_predictors_32` (tests/gpu/test_code_predictor_gpu.py) with the defaults of an sm90 GPU: the CUDA products
    and draw, the rows passes under PDL with the early triggers, their norms launches of their own (the tests set
    `rows_early` and put the default back)."""
    return code_predictors_32(triton_model, runners, cp_cuda_draw=None, cp_cuda_gemv=True, cp_rows_pdl=True,
                              cp_early_trigger=True)


# passes of 3 rows (prefill 6), 16 (prefill 32) and 32 (prefill 64)
@pytest.mark.parametrize("b", [3, 16, 32])
def test_rows_passes_under_pdl_equal_torch(rows_code_predictors, runners, b):
    cfg, _ = runners
    (fast_cp, ref_cp), _ = rows_code_predictors
    assert fast_cp.pass_pdl(b) and fast_cp.rows_product(b) is fast_cp.gemv_kernel is not None
    before = fast_cp.gemv_kernel.launches
    _compare_code_predictor_steps(fast_cp, ref_cp, b, cfg.talker.code_predictor.hidden_size)
    # the prefill (on the rows up to gemv_kernel_rows) and two one-position passes: 20 products each (no qkv table
    # here), and the three heads (b rows each)
    prefill = 20 if 2 * b <= fast_cp.gemv_kernel_rows else 0
    assert fast_cp.gemv_kernel.launches - before == prefill + 2 * 20 + 3


@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize("b", [4, 32])
def test_rows_passes_under_pdl_give_the_codes_without(rows_code_predictors, runners, b, early):
    """Whole frames of the rows passes (the products, norms, attention, heads and draws under PDL, each product's
    weights loaded before its wait; with early, every launch that may (cp_launch.ROWS_EARLY_LAUNCHES) letting the next
    start before its wait) captured in a graph as the engine runs it, against the same kernels without PDL: any
    difference is a kernel reading before its input is written."""
    from tts_engine.runtime.code_predictor import ROWS_EARLY_LAUNCHES
    from tts_engine.runtime.sampler import GENERAL

    cfg, _ = runners
    (cp, _), sampling = rows_code_predictors
    hidden = torch.randn(b, cfg.talker.hidden_size, device="cuda").bfloat16()
    inputs = (hidden.clone(), torch.randn_like(hidden))
    c0 = torch.arange(b, device="cuda") * 97 % 2048
    frames = torch.arange(b, device="cuda") + 3
    rows = sampling.gather(torch.arange(b, device="cuda"))
    codes = {}
    cp.rows_early = ROWS_EARLY_LAUNCHES if early else ()
    try:
        with torch.inference_mode():
            for pdl in (False, True):
                cp.rows_pdl = pdl
                assert cp.pass_pdl(b) == pdl
                codes[pdl] = graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL),
                                            before=lambda i: hidden.copy_(inputs[i % 2]))
    finally:
        cp.rows_pdl, cp.rows_early = True, ROWS_EARLY_LAUNCHES
    assert len(torch.cat(codes[False]).unique()) > 1
    assert_pdl_gives_the_output_without(
        codes, f"codes ({codes[True][0][:2].tolist()} with PDL, {codes[False][0][:2].tolist()} without)")
