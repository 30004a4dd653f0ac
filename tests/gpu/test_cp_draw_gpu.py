"""The CUDA code-predictor draw (kernels/cuda/cp_draw.cu through kernels/cp_draw.py) on an sm90 GPU: it draws from
exactly the reference's distribution (the checks of tests/kernels/test_sample.py: each sampled id inside its
reference CDF interval at the reference's counter uniform, greedy ids the argmax), the ids the Triton draw picks for
the same rows, the gathers of the picked ids' rows; and in the runner's frames, captured in graphs with PDL, the codes
of the frames drawn by the Triton kernel, replay after replay. The runners: tests/gpu/conftest.py."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.replays import graph_replays
from tests.kernels.test_sample import TOP_K, TOP_P, check_picks, settings
from tts_engine.kernels.cp_draw import CpDrawKernel
from tts_engine.kernels.sample import sample_rows, sample_rows_ref
from tts_engine.sampling import counter_uniform

V = 2048


@pytest.fixture(scope="module")
def kernel(cuda):
    return CpDrawKernel(V, cuda)


def _reference(logits, s, codebook):
    return sample_rows_ref(logits.cpu(), codebook=codebook, **{k: v.cpu() for k, v in s.items()})


@pytest.mark.parametrize("codebook", [1, 2, 15])
def test_draw_is_the_reference_inverse_cdf(kernel, codebook):
    g = torch.Generator().manual_seed(codebook)
    b = len(TOP_K)
    logits = (torch.randn(b, V, generator=g) * 3).to("cuda", torch.bfloat16)
    s = settings(b, g, "cuda", top_k=TOP_K, top_p=TOP_P, greedy_rows=(10, 11))
    out = torch.full((b, 15), -7, dtype=torch.long, device="cuda")
    kernel.draw(logits, out[:, codebook - 1], codebook=codebook, **s)
    check_picks(out[:, codebook - 1], _reference(logits, s, codebook), s["do_sample"].cpu(), f"codebook {codebook}")
    assert (out[:, [j for j in range(15) if j != codebook - 1]] == -7).all(), "wrote outside its column"


def test_top_k_threshold_with_ties_and_extreme_k(kernel):
    """Scores on a coarse grid (runs of equal scores straddle the k-th), k from 1 to V - 1, adjacent bf16 values
    around the k-th, scores spanning the whole range: the kept set is exactly the k largest (ties at the k-th kept)."""
    g = torch.Generator().manual_seed(11)
    ks = [1, 2, 3, 7, 50, 2047, 50, 50]
    b = len(ks)
    logits = ((torch.randn(b, V, generator=g) * 2).round() / 2).bfloat16()  # ~20 distinct scores a row
    logits[6] = -3e38
    one = torch.tensor(1.0, dtype=torch.bfloat16).view(torch.int16)
    logits[6, :100] = (one + torch.arange(100, dtype=torch.int16)).view(torch.bfloat16)  # 1 bf16 ulp apart
    logits[7, 1500:] = 1e30
    s = settings(b, g, "cuda", top_k=ks, top_p=[1.0] * b)
    s["temperature"] = torch.full((b,), 1.0, device="cuda")
    out = torch.empty(b, dtype=torch.long, device="cuda")
    kernel.draw(logits.cuda(), out, codebook=3, **s)
    check_picks(out, _reference(logits, s, 3), s["do_sample"].cpu(), "ties")


def test_many_uniforms_cover_the_kept_set_only(kernel):
    g = torch.Generator().manual_seed(7)
    b = 400
    logits = (torch.randn(1, V, generator=g) * 2).expand(b, -1).contiguous().to("cuda", torch.bfloat16)
    s = settings(b, g, "cuda", top_k=[20] * b, top_p=[1.0] * b)
    s["temperature"] = torch.full((b,), 1.5, device="cuda")
    s["frame"] = torch.arange(b, device="cuda")
    out = torch.empty(b, dtype=torch.long, device="cuda")
    kernel.draw(logits, out, codebook=4, **s)
    check_picks(out, _reference(logits, s, 4), s["do_sample"].cpu(), "repeated row")
    assert len(set(out.cpu().tolist())) >= 15, "a top-20 draw at temperature 1.5 should reach most of its set"


def test_uniform_is_the_counter_hash(kernel):
    """Two equal finite scores, the rest -inf: the CDF is 0.5, 1 and the pick is exactly (u >= 0.5)."""
    b = 64
    g = torch.Generator().manual_seed(3)
    logits = torch.full((b, V), float("-inf"), device="cuda", dtype=torch.bfloat16)
    logits[:, :2] = 0.0
    s = settings(b, g, "cuda", top_k=[0] * b, top_p=[1.0] * b)
    s["temperature"] = torch.ones(b, device="cuda")
    out = torch.empty(b, dtype=torch.long, device="cuda")
    kernel.draw(logits, out, codebook=9, **s)
    want = [int(counter_uniform(int(sd), int(f), 9) >= 0.5) for sd, f in zip(s["seed"].cpu(), s["frame"].cpu())]
    assert out.cpu().tolist() == want


def test_picks_the_ids_the_triton_draw_picks_and_gathers_their_rows(kernel):
    """256 rows of mixed settings (top-k 1-2,047 or off, top-p, temperatures, greedy rows): the ids of `sample_rows`
    (the same kept set and uniform; the CDFs differ in rounding only), and both tables' rows of them gathered. The
    rows without top-p are checked against the reference too; those with it are not: bf16 scores this spread tie
    often, and where a run of equal scores straddles the top-p mass, both kernels keep or drop it whole while the
    reference's unstable sort splits it (seen at row 111: both kernels' id outside the reference's interval)."""
    g = torch.Generator().manual_seed(21)
    b = 256
    logits = (torch.randn(b, V, generator=g) * 4).to("cuda", torch.bfloat16)
    ks = torch.randint(0, V, (b,), generator=g).tolist()
    ks[::4] = [50] * len(ks[::4])
    ps = [1.0 if i % 3 else 0.5 + 0.5 * float(torch.rand(1, generator=g)) for i in range(b)]
    s = settings(b, g, "cuda", top_k=ks, top_p=ps, greedy_rows=range(0, b, 17))
    table = torch.randn(V, 1024, generator=g).to("cuda", torch.bfloat16)
    table2 = torch.randn(V, 4096, generator=g).to("cuda", torch.bfloat16)
    x = torch.full((b, 2, 1024), float("nan"), device="cuda", dtype=torch.bfloat16)[:, 1]  # rows 2,048 apart
    x2 = torch.full((b, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
    got, want = (torch.empty(b, dtype=torch.long, device="cuda") for _ in range(2))
    kernel.draw(logits, got, codebook=6, gather=(table, x), gather2=(table2, x2), **s)
    sample_rows(logits, want, codebook=6, **s)
    differ = (got != want).nonzero().flatten().tolist()
    assert not differ, f"rows {differ}: {got[differ].tolist()} against the Triton draw's {want[differ].tolist()}"
    plain = [r for r in range(b) if ps[r] == 1.0]
    check_picks(got[plain], _reference(logits[plain], {k: v[plain] for k, v in s.items()}, 6),
                s["do_sample"][plain].cpu(), "mixed settings without top-p")
    assert torch.equal(x, table[got]) and torch.equal(x2, table2[got]), "the picked ids' rows of both tables"


def test_bad_arguments_are_refused(kernel):
    g = torch.Generator().manual_seed(0)
    s = settings(2, g, "cuda", top_k=[50, 50], top_p=[1.0, 1.0])
    out = torch.empty(2, dtype=torch.long, device="cuda")
    logits = torch.zeros(2, V, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="bf16 logits"):
        kernel.draw(logits.float(), out, codebook=1, **s)
    with pytest.raises(ValueError, match="bf16 logits"):
        kernel.draw(logits[:, :1024], out, codebook=1, **s)
    with pytest.raises(ValueError, match="top_k"):
        kernel.draw(logits, out, codebook=1, **{**s, "top_k": s["top_k"].int()})
    table = torch.zeros(V, 1024, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="gather2"):
        kernel.draw(logits, out, codebook=1, gather2=(table, torch.zeros(2, 1000, device="cuda",
                                                                         dtype=torch.bfloat16)), **s)


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("sampled", [True, False])
def test_frames_draw_what_the_triton_draw_would(runners, kernel, batch, sampled):
    """Whole code-predictor frames (batch 1: the PDL passes, each draw triggering the next launch early; 8: the rows
    passes, under PDL on the CUDA kernel's rows) captured in a graph, inputs alternating between two: every replay
    gives its input's codes, and the CUDA draw's frames the codes of the Triton draw's."""
    from tts_engine.runtime.sampler import GENERAL

    cfg, (fast, _) = runners
    cp = fast.code_predictor
    g = torch.Generator(device="cuda").manual_seed(batch)
    hidden = torch.randn(batch, cfg.talker.hidden_size, device="cuda", generator=g).bfloat16()
    inputs = (hidden.clone(), torch.randn(hidden.shape, device="cuda", generator=g).bfloat16())

    def alternate(i):
        hidden.copy_(inputs[i % 2])

    c0 = torch.arange(batch, device="cuda") * 37 + 5
    frames = torch.arange(batch, device="cuda") + 3
    rows = fast.rows.gather(torch.arange(batch, device="cuda") % 8)
    rows.sub_do_sample.fill_(sampled)
    rows.sub_temperature.fill_(0.9)
    rows.sub_top_k.fill_(50)
    rows.sub_top_p.fill_(1.0)
    outs = {}
    was, launched = cp.draw_kernel, kernel.launches
    with torch.inference_mode():
        try:
            for name, k in (("triton", None), ("cuda", kernel)):
                cp.draw_kernel = k
                outs[name] = graph_replays(lambda: cp.predict(hidden, c0, frames, rows, variant=GENERAL), n=6,
                                           before=alternate)
        finally:
            cp.draw_kernel = was
    assert kernel.launches - launched == 2 * 15, "the frames' draws are the CUDA kernel's (one frame, one capture)"
    for name, replays in outs.items():
        differ = [i for i, got in enumerate(replays) if not torch.equal(got, replays[i % 2])]
        assert not differ, f"{name}: replays {differ} differ from their input's first"
    assert not torch.equal(outs["cuda"][0], outs["cuda"][1]), "two inputs, one frame of codes"
    for i in (0, 1):
        assert torch.equal(outs["cuda"][i], outs["triton"][i]), \
            f"input {i}: {outs['cuda'][i].tolist()} against the Triton draw's {outs['triton'][i].tolist()}"
