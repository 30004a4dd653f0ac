"""The fused sampling kernel draws from exactly the reference's distribution.

For a sampled row the kernel's id must be the inverse CDF, in id order, of the reference's warped
distribution (`sampling.warp`, float64 softmax) at the reference's counter uniform: cdf[id - 1] <= u
< cdf[id], up to float32 rounding of the CDF. That pins the kept set (top-k, top-p, penalties,
masks) and the uniform: a wrong threshold or hash moves most picks out of their interval.
Greedy rows must equal the argmax of the processed logits exactly.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tts_engine.kernels.sample import _top_k_window, sample_rows, sample_rows_ref
from tts_engine.sampling import counter_uniform, suppress_mask

TOL = 2e-6  # the kernel sums an fp32 CDF; the reference's is float64


def settings(b: int, g: torch.Generator, device, *, top_k, top_p, greedy_rows=()) -> dict:
    return dict(do_sample=torch.tensor([i not in greedy_rows for i in range(b)], device=device),
                temperature=(0.5 + torch.rand(b, generator=g)).to(device),
                top_k=torch.tensor(top_k, device=device), top_p=torch.tensor(top_p, device=device),
                seed=torch.randint(0, 2**63 - 1, (b,), generator=g).to(device),
                frame=torch.randint(0, 500, (b,), generator=g).to(device))


def check_picks(ids: torch.Tensor, want: tuple, do_sample: torch.Tensor, what: str) -> None:
    greedy, kept, cdf, u = want
    for r, i in enumerate(ids.cpu().tolist()):
        if not do_sample[r]:
            assert i == int(greedy[r]), f"{what} row {r}: greedy {i}, reference {int(greedy[r])}"
            continue
        assert 0 <= i < kept.shape[1] and kept[r, i], f"{what} row {r}: id {i} is filtered by the reference"
        lo = float(cdf[r, i - 1]) if i > 0 else 0.0
        assert lo - TOL <= float(u[r]) < float(cdf[r, i]) + TOL, \
            f"{what} row {r}: u={float(u[r]):.8f} outside its id's CDF interval [{lo:.8f}, {float(cdf[r, i]):.8f})"


TOP_K = [50, 0, 1, 64, 100, 2048, 50, 50, 5, 3000, 50, 0]
TOP_P = [1.0, 1.0, 1.0, 1.0, 0.9, 0.5, 0.7, 1.0, 1.0, 0.95, 1.0, 1.0]


@pytest.mark.parametrize("window", [0, 10])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("codebook", [1, 2, 15])
def test_code_predictor_draw_is_the_reference_inverse_cdf(device, dtype, codebook, window):
    g = torch.Generator().manual_seed(codebook)
    b = len(TOP_K)
    logits = (torch.randn(b, 2048, generator=g) * 3).to(device, dtype)
    s = settings(b, g, device, top_k=TOP_K, top_p=TOP_P, greedy_rows=(10, 11))
    out = torch.full((b, 15), -7, dtype=torch.long, device=device)
    sample_rows(logits, out[:, codebook - 1], codebook=codebook, top_k_window=window, **s)
    check_picks(out[:, codebook - 1], sample_rows_ref(logits.cpu(), codebook=codebook,
                                                      **{k: v.cpu() for k, v in s.items()}),
                s["do_sample"].cpu(), f"codebook {codebook} {dtype} window {window}")
    assert (out[:, [j for j in range(15) if j != codebook - 1]] == -7).all(), "wrote outside its column"


@pytest.mark.parametrize(("window", "ways"), [(0, 2), (1, 2), (12, 2), (1, 3), (8, 3), (1, 4), (6, 4)])
def test_top_k_threshold_with_ties_and_extreme_k(device, window, ways):
    """Scores on a coarse grid (runs of equal scores straddle the k-th), k from 1 to V - 1, and rows
    whose scores span the whole float range: the search's threshold is the k-th largest score, by the
    key bisection (window 0) and by the value range's passes (halvings, or thirds / quarters from one
    packed count) and the window's walk (1 pass: a long walk)."""
    g = torch.Generator().manual_seed(11)
    ks = [1, 2, 3, 7, 50, 2047, 50, 50]
    b = len(ks)
    logits = (torch.randn(b, 2048, generator=g) * 2).round() / 2  # ~20 distinct scores a row
    # The keys span nearly the whole float range and the scores around the k-th are adjacent floats
    # (keys 1 apart): the search must end on the k-th key itself, not within a few of it.
    logits[6] = -3e38
    one = torch.full((100,), 1.0).view(torch.int32)
    logits[6, :100] = (one + torch.arange(100, dtype=torch.int32)).view(torch.float32)
    logits[7, 1500:] = 1e30
    check_top_k_draw(logits, ks, g, device, window, ways, codebook=3, what="ties")


def check_top_k_draw(logits: torch.Tensor, ks: list[int], g: torch.Generator, device, window: int, ways: int, *,
                     codebook: int, what: str) -> None:
    """One top-k draw a row of logits (CPU) at temperature 1 by the given search; the picks checked."""
    b = len(ks)
    s = settings(b, g, device, top_k=ks, top_p=[1.0] * b)
    s["temperature"] = torch.full((b,), 1.0, device=device)
    out = torch.empty(b, dtype=torch.long, device=device)
    sample_rows(logits.to(device), out, codebook=codebook, top_k_window=window, top_k_ways=ways, **s)
    check_picks(out, sample_rows_ref(logits, codebook=codebook, **{k: v.cpu() for k, v in s.items()}),
                s["do_sample"].cpu(), f"{what}, window {window}, {ways} ways")


@pytest.mark.parametrize(("window", "ways"), [(0, 2), (12, 2), (8, 3), (6, 4)])
def test_many_uniforms_cover_the_kept_set_only(device, window, ways):
    """One row, 400 frames: every pick in the reference's top-k set, and the picks spread over it, with
    each top-k search."""
    g = torch.Generator().manual_seed(7)
    row = torch.randn(1, 2048, generator=g) * 2
    b = 400
    logits = row.expand(b, -1).contiguous().to(device)
    s = settings(b, g, device, top_k=[20] * b, top_p=[1.0] * b)
    s["temperature"] = torch.full((b,), 1.5, device=device)
    s["frame"] = torch.arange(b, device=device)
    out = torch.empty(b, dtype=torch.long, device=device)
    sample_rows(logits, out, codebook=4, top_k_window=window, top_k_ways=ways, **s)
    want = sample_rows_ref(logits.cpu(), codebook=4, **{k: v.cpu() for k, v in s.items()})
    check_picks(out, want, s["do_sample"].cpu(), f"repeated row, window {window}, {ways} ways")
    assert len(set(out.cpu().tolist())) >= 15, "a top-20 draw at temperature 1.5 should reach most of its set"


def test_uniform_is_the_counter_hash(device):
    """A flat row over 2 ids splits [0, 1) at 0.5: the pick is exactly (u >= 0.5), u from the hash."""
    b = 64
    g = torch.Generator().manual_seed(3)
    logits = torch.zeros(b, 2, device=device)
    s = settings(b, g, device, top_k=[0] * b, top_p=[1.0] * b)
    s["temperature"] = torch.ones(b, device=device)
    out = torch.empty(b, dtype=torch.long, device=device)
    sample_rows(logits, out, codebook=9, **s)
    want = [int(counter_uniform(int(sd), int(f), 9) >= 0.5) for sd, f in zip(s["seed"].cpu(), s["frame"].cpu())]
    assert out.cpu().tolist() == want


def codebook0_inputs(b: int, g: torch.Generator, device) -> tuple[torch.Tensor, dict]:
    v, eos = 3072, 2150
    logits = (torch.randn(b, v, generator=g) * 3).to(device)
    logits[0, eos] = 50.0  # EOS would win if it were allowed
    logits[1, v - 5] = 60.0  # a suppressed control id would win if it were not masked
    seen = torch.rand(b + 2, v, generator=g) < 0.1
    c0 = dict(penalty=torch.tensor([1.05, 1.3, 2.0, 1.0, 1.1, 1.05][:b], device=device),
              min_new=torch.tensor([2] * b, device=device),
              eos_ok=torch.tensor([True, True, False, True, True, True][:b], device=device),
              slots=torch.tensor([3, 0, 7, 1, 2, 5][:b], device=device), seen=seen.to(device),
              suppress=suppress_mask(v, eos).to(device), eos_id=eos)
    return logits, c0


@pytest.mark.parametrize("window", [0, 10])
def test_codebook0_processors_penalty_eos_and_suppression(device, window):
    g = torch.Generator().manual_seed(11)
    b = 6
    logits, c0 = codebook0_inputs(b, g, device)
    s = settings(b, g, device, top_k=[50, 0, 50, 10, 50, 50], top_p=[1.0, 0.8, 1.0, 1.0, 1.0, 1.0],
                 greedy_rows=(5,))
    s["frame"] = torch.tensor([0, 9, 9, 9, 1, 9], device=device)  # row 0: before min_new_tokens
    seen_before = c0["seen"].clone()
    want = sample_rows_ref(logits.cpu(), codebook=0, codebook0={k: (v.cpu() if torch.is_tensor(v) else v)
                                                                 for k, v in c0.items()},
                           **{k: v.cpu() for k, v in s.items()})
    out = torch.empty(b, dtype=torch.long, device=device)
    sample_rows(logits, out, codebook=0, codebook0=c0, top_k_window=window, **s)
    check_picks(out, want, s["do_sample"].cpu(), f"codebook 0, window {window}")
    assert int(out[0]) != c0["eos_id"] and int(out[1]) < 3072 - 1024
    marked = seen_before.cpu().clone()
    marked[c0["slots"].cpu(), out.cpu()] = True
    assert torch.equal(c0["seen"].cpu(), marked), "the picked ids (and only they) are marked seen"


def test_gathers_the_picked_ids_embedding(device):
    g = torch.Generator().manual_seed(5)
    b, h = 5, 1536  # more than one gather block
    logits = torch.randn(b, 2048, generator=g).to(device)
    table = torch.randn(2048, h, generator=g).to(device, torch.bfloat16)
    x = torch.empty(b, 2, h, device=device, dtype=torch.bfloat16)[:, 1]  # rows 2h apart
    s = settings(b, g, device, top_k=[50] * b, top_p=[1.0] * b, greedy_rows=(0,))
    out = torch.empty(b, dtype=torch.long, device=device)
    sample_rows(logits, out, codebook=2, gather=(table, x), **s)
    assert torch.equal(x, table[out]), "x_out rows are the picked ids' embeddings"


@pytest.mark.parametrize(("block", "together"), [(4096, True), (1024, True), (1024, False), (64, True)])
def test_gathers_a_second_table_row_for_the_picked_id(device, monkeypatch, block, together):
    """gather2 (the code predictor's first-layer qkv table): the picked id's row of a second, wider table into a
    second output, beside the first gather, the ids those of the draw without it; every element written. With the
    rows' first blocks loaded together (`GATHER_TOGETHER`) or each block in turn, in one block or several (the rest
    of a row past its first block)."""
    from tts_engine.kernels import sample

    monkeypatch.setattr(sample, "GATHER_BLOCK", block)
    monkeypatch.setattr(sample, "GATHER_TOGETHER", together)
    g = torch.Generator().manual_seed(6)
    b, h, w = 5, 96, 2500  # w: more than two gather blocks, not a multiple of one
    logits = torch.randn(b, 2048, generator=g).to(device)
    table = torch.randn(2048, h, generator=g).to(device, torch.bfloat16)
    table2 = torch.randn(2048, w, generator=g).to(device, torch.bfloat16)
    s = settings(b, g, device, top_k=[50] * b, top_p=[1.0] * b, greedy_rows=(0,))
    x = torch.empty(b, h, device=device, dtype=torch.bfloat16)
    x2 = torch.full((b, 2, w), float("nan"), device=device, dtype=torch.bfloat16)[:, 0]  # rows 2w apart
    out, alone = (torch.empty(b, dtype=torch.long, device=device) for _ in range(2))
    sample_rows(logits, out, codebook=3, gather=(table, x), gather2=(table2, x2), **s)
    sample_rows(logits, alone, codebook=3, gather=(table, x), **s)
    assert torch.equal(out, alone), "the second gather changed the draw"
    assert torch.equal(x, table[out]) and torch.equal(x2, table2[out]), "the picked ids' rows of both tables"
    with pytest.raises(ValueError, match="gather2"):
        sample_rows(logits, out, codebook=3, gather=(table, x), gather2=(table2, x2[:, :-1]), **s)


@pytest.mark.parametrize(("window", "ways"), [(0, 2), (10, 2), (8, 3), (6, 4)])
@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_every_draw_launch_picks_within_the_reference_interval(device, warps, window, ways):
    """Every draw launch (warps a row, top-k search) picks the reference's ids, for the
    code predictor's draw with its gather and for the talker's codebook 0 (the warps only change the
    order of a row's sums: under the interpreter they are one program either way)."""
    g = torch.Generator().manual_seed(warps * 100 + window * 10 + ways)
    b = len(TOP_K)
    logits = (torch.randn(b, 2048, generator=g) * 3).to(device, torch.bfloat16)
    s = settings(b, g, device, top_k=TOP_K, top_p=TOP_P, greedy_rows=(10,))
    table = torch.randn(2048, 1024, generator=g).to(device, torch.bfloat16)
    x = torch.empty(b, 1024, device=device, dtype=torch.bfloat16)
    out = torch.empty(b, dtype=torch.long, device=device)
    sample_rows(logits, out, codebook=5, gather=(table, x), num_warps=warps, top_k_window=window, top_k_ways=ways,
                **s)
    check_picks(out, sample_rows_ref(logits.cpu(), codebook=5, **{k: v.cpu() for k, v in s.items()}),
                s["do_sample"].cpu(), f"{warps} warps, window {window}, {ways} ways")
    assert torch.equal(x, table[out])
    logits0, c0 = codebook0_inputs(6, g, device)
    s0 = settings(6, g, device, top_k=[50, 0, 50, 10, 50, 50], top_p=[1.0, 0.8, 1.0, 1.0, 1.0, 1.0])
    want = sample_rows_ref(logits0.cpu(), codebook=0, codebook0={k: (v.cpu() if torch.is_tensor(v) else v)
                                                                  for k, v in c0.items()},
                           **{k: v.cpu() for k, v in s0.items()})
    out0 = torch.empty(6, dtype=torch.long, device=device)
    sample_rows(logits0, out0, codebook=0, codebook0=c0, num_warps=warps, top_k_window=window, top_k_ways=ways,
                **s0)
    check_picks(out0, want, s0["do_sample"].cpu(), f"codebook 0, {warps} warps, window {window}, {ways} ways")


def test_a_search_of_other_ways_is_refused():
    logits = torch.zeros(1, 8)
    s = settings(1, torch.Generator().manual_seed(0), "cpu", top_k=[2], top_p=[1.0])
    with pytest.raises(ValueError, match="top_k_ways must be 2, 3 or 4"):
        sample_rows(logits, torch.empty(1, dtype=torch.long), codebook=1, top_k_ways=5, **s)



@triton.jit
def keep_top_k(s_ptr, k_ptr, out_ptr, n, BLOCK: tl.constexpr, COARSE: tl.constexpr, WAYS: tl.constexpr):
    """One row a program: its scores through `_top_k_window`, stored."""
    row = tl.program_id(0)
    ids = tl.arange(0, BLOCK)
    valid = ids < n
    s = tl.load(s_ptr + row * n + ids, mask=valid, other=float("-inf"))
    tl.store(out_ptr + row * n + ids, _top_k_window(s, valid, tl.load(k_ptr + row), COARSE, WAYS), mask=valid)


@pytest.mark.parametrize(("window", "ways"), [(1, 2), (12, 2), (1, 3), (8, 3), (1, 4), (6, 4)])
def test_the_window_search_keeps_exactly_the_k_largest(device, window, ways):
    """`_top_k_window` alone, in a kernel of this test: its kept set is exactly the scores >= the k-th
    largest (ties kept), for k from 1 to V over spread scores, scores on a coarse grid, -inf entries and
    scores across the whole float range (the picks of the tests above cannot tell a set that differs by
    a few low-probability scores when k is large)."""
    g = torch.Generator().manual_seed(window * 10 + ways)
    n = 2048
    ks = [1, 2, 50, 300, 1000, 1024, 1500, 1900, 2047, 2048, 700, 40, 5, 1200]
    rows = torch.randn(len(ks), n, generator=g) * 4
    rows[10] = (rows[10] * 2).round() / 2  # runs of ties straddle the k-th
    rows[11, ::3] = float("-inf")  # fewer finite scores than some k would need
    rows[12, :1000] = -3e38
    rows[12, 1000:] = 3e38 * torch.rand(n - 1000, generator=g)
    rows[13, 500:] = 1e30
    k = torch.tensor(ks, dtype=torch.int32)
    out = torch.empty_like(rows, device=device)
    keep_top_k[(len(ks),)](rows.to(device), k.to(device), out, n, BLOCK=n, COARSE=window, WAYS=ways)
    out = out.cpu()
    for r, kr in enumerate(ks):
        finite = rows[r][rows[r] > float("-inf")]
        kth = finite.sort(descending=True).values[min(kr, finite.numel()) - 1]
        want = torch.where(rows[r] >= kth, rows[r], float("-inf"))
        assert torch.equal(out[r], want), f"row {r}, k {kr}: kept {(out[r] > float('-inf')).sum()} " \
                                          f"scores, want {(want > float('-inf')).sum()}"


@pytest.mark.parametrize(("window", "ways"), [(0, 2), (12, 2), (8, 3), (6, 4)])
def test_large_k_over_spread_scores(device, window, ways):
    """k of 300-2000 over 2048 distinct scores: counts near the threshold run into the thousands, so a
    packed count whose fields overlapped (or a search that lost its invariant) would keep another set."""
    g = torch.Generator().manual_seed(window * 10 + ways)
    ks = [300, 700, 1000, 1500, 1900, 2000, 1024, 513]
    logits = torch.randn(len(ks), 2048, generator=g) * 4
    check_top_k_draw(logits, ks, g, device, window, ways, codebook=6, what="large k")
