"""bench.step_sweep's coordinate descent on a synthetic step: each product keeps the candidate that makes
the step fastest given the others, a candidate that raises is reported and never kept, and the table is
left at the best found."""

from __future__ import annotations

import torch

from bench.step_sweep import CANDIDATES, coordinate_sweep


def test_each_product_keeps_its_fastest_candidate_in_the_step():
    table = {"qkv": dict(block_n=4, num_warps=4, pdl=True), "o": dict(block_n=2, num_warps=4, pdl=True)}
    best = {"qkv": (2, 8), "o": (8, 2)}

    def measure():  # ms: 1.0 at the best of both, more the further each product is from its best
        cost = 1.0
        for name, (n, w) in best.items():
            cfg = table[name]
            if cfg["block_n"] == 1 and name == "o":
                raise RuntimeError("out of registers")
            cost += 0.01 * (abs(cfg["block_n"] - n) + abs(cfg["num_warps"] - w))
        return cost

    result = coordinate_sweep(measure, table, ("qkv", "o"), rounds=2)
    assert {k: (v["block_n"], v["num_warps"]) for k, v in table.items()} == best
    assert all(cfg["pdl"] for cfg in table.values())  # the rest of each entry is kept
    assert result["best_ms"] == 1.0 and result["start_ms"] > 1.0
    assert len(result["trials"]) == 4 and all(len(t["times"]) == len(CANDIDATES) for t in result["trials"])
    o_trials = [t for t in result["trials"] if t["product"] == "o"]
    assert all(t["times"]["n1w2"].startswith("RuntimeError") for t in o_trials)


def test_a_product_whose_every_candidate_fails_keeps_its_entry():
    table = {"down": dict(block_n=2, num_warps=8)}
    calls = []

    def measure():
        calls.append(dict(table["down"]))
        if len(calls) > 1:
            raise ValueError("no launch fits")
        return 2.0

    result = coordinate_sweep(measure, table, ("down",), rounds=1)
    assert table["down"] == dict(block_n=2, num_warps=8) and result["best_ms"] == 2.0


def test_the_draw_stage_sweeps_its_launch_as_one_entry():
    """Stage "draw": one entry (kernels/sample.py DRAW_LAUNCH) over warps x halvings x parts, named by all three."""
    from bench.step_sweep import DRAW_CANDIDATES

    table = {"draw": dict(num_warps=8, top_k_window=12, top_k_ways=2)}

    def measure():
        cfg = table["draw"]
        return 1.0 + 0.01 * (abs(cfg["num_warps"] - 4) + abs(cfg["top_k_window"] - 14) + abs(cfg["top_k_ways"] - 3))

    result = coordinate_sweep(measure, table, ("draw",), DRAW_CANDIDATES, rounds=1)
    assert table["draw"] == dict(num_warps=4, top_k_window=14, top_k_ways=3) and result["best_ms"] == 1.0
    assert result["trials"][0]["kept"] == "w4k14x3" and len(result["trials"][0]["times"]) == len(DRAW_CANDIDATES)


def test_the_down_stages_sweep_whole_and_sliced_rows_and_a_later_whole_candidate_drops_the_slices():
    """Stages "talker_down" / "cp_down": SLICED_CANDIDATES name their slices, and every candidate says its own
    `row_chunks`, so a whole-row candidate after a sliced winner does not inherit the slices."""
    from bench.step_sweep import SLICED_CANDIDATES

    table = {"down": dict(block_n=4, num_warps=4, whole_rows=True, pdl=True)}
    seen = []

    def measure():
        cfg = table["down"]
        seen.append((cfg["block_n"], cfg["num_warps"], cfg["row_chunks"]) if "row_chunks" in cfg else None)
        return 1.0 + 0.01 * abs(cfg["block_n"] - 8) + 0.01 * abs(cfg["num_warps"] - 8) + (0.0 if cfg.get(
            "row_chunks") == 3 else 0.05)

    result = coordinate_sweep(measure, table, ("down",), SLICED_CANDIDATES, rounds=2)
    assert table["down"] == dict(block_n=8, num_warps=8, row_chunks=3, whole_rows=True, pdl=True)
    assert result["trials"][1]["kept"] == "n8w8c3" and "n4w4c1" in result["trials"][0]["times"]
    assert (4, 4, 1) in seen[len(SLICED_CANDIDATES) + 1:]  # round 2's whole rows really are whole


def test_the_stream_stages_candidates_each_name_their_row_blocks_and_compute_the_product():
    """Stages "talker_stream" / "cp_stream": STREAM_CANDIDATES (gemv `row_blocks`; down's also in three slices) have
    distinct keys naming their blocks a program, and each, launched as the sweep merges it onto a product's
    whole-row entry, gives that product (interpreter on CPU; the sweep times them on the GPU)."""
    from bench.step_sweep import PRODUCTS, STREAM_CANDIDATES, STREAM_DOWN_CANDIDATES, _key, stream_candidates
    from tests.kernels.compare import assert_same_rounding
    from tts_engine.kernels.gemv import gemv, gemv_ref

    per_product = stream_candidates(PRODUCTS["cp"])
    assert per_product["down"] == STREAM_DOWN_CANDIDATES and per_product["gate_up"] == STREAM_CANDIDATES
    keys = [_key(c) for c in STREAM_DOWN_CANDIDATES]
    assert len(set(keys)) == len(keys) and {c.get("row_chunks") for c in STREAM_DOWN_CANDIDATES} == {1, 3}
    assert all(f"b{c['row_blocks']}" in k for k, c in zip(keys, STREAM_DOWN_CANDIDATES))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 96, generator=g).to(device, torch.bfloat16)
    w = (torch.randn(2 * 37, 96, generator=g) / 10).to(device, torch.bfloat16)
    r = torch.randn(1, 2 * 37, generator=g).to(device, torch.bfloat16)
    entry = dict(block_n=8, num_warps=4, whole_rows=True, residual_early=True)
    # A kernel's layout is set by its rows, warps and slices; the blocks a program only loop: each of those
    # compiled once (the interpreter's cost is per call), the block counts taken in turn.
    launches = {}
    for cand in STREAM_DOWN_CANDIDATES:
        launches.setdefault((cand["block_n"], cand["num_warps"], cand["row_chunks"]), []).append(cand)
    for i, cands in enumerate(launches.values()):
        cand = cands[i % len(cands)]
        assert_same_rounding(gemv(x, w, residual=r, **{**entry, **cand}), gemv_ref(x, w, residual=r), _key(cand))
    assert {cands[i % len(cands)]["row_blocks"] for i, cands in enumerate(launches.values())} == {2, 4, 8, 16}


def test_a_sweep_with_candidates_by_product_tries_each_products_own():
    """`coordinate_sweep` with a tuple of candidates a product (the stream stages): down tries its 48 (one slice or
    three), gate/up its 24, and each keeps its own fastest."""
    from bench.step_sweep import STREAM_CANDIDATES, _key, stream_candidates

    table = {"gate_up": dict(block_n=8, num_warps=4, whole_rows=True), "down": dict(block_n=4, num_warps=4)}
    tried = {"gate_up": set(), "down": set()}

    def measure():
        down, gate_up = table["down"], table["gate_up"]
        for name in tried:
            if "row_blocks" in table[name]:
                tried[name].add(_key(table[name]))
        return 1.0 - 0.1 * (down.get("row_chunks") == 3) - 0.01 * down.get("row_blocks", 0) \
            - 0.001 * gate_up.get("row_blocks", 0) - 0.0001 * gate_up["num_warps"]

    result = coordinate_sweep(measure, table, ("gate_up", "down"), stream_candidates(("gate_up", "down")), rounds=1)
    n = len(STREAM_CANDIDATES)
    assert {k: len(v) for k, v in tried.items()} == {"gate_up": n, "down": 2 * n}
    assert table["down"]["row_chunks"] == 3 and table["down"]["row_blocks"] == 16
    assert table["gate_up"]["row_blocks"] == 16 and table["gate_up"]["num_warps"] == 8
    assert "row_chunks" not in table["gate_up"] and result["trials"][1]["kept"].endswith("c3b16")


def test_with_keep_competes_an_entry_faster_than_every_candidate_stays():
    """The stream stages' candidates are all streamed: with keep_competes the entry as it stands is timed too
    ("kept") and, faster than every candidate, stays; without it the fastest candidate would replace it."""
    from bench.step_sweep import STREAM_CANDIDATES

    def run(keep_competes: bool) -> tuple[dict, dict]:
        table = {"o": dict(block_n=2, num_warps=2, whole_rows=True)}

        def measure():
            return 1.0 + 0.1 * ("row_blocks" in table["o"]) + 0.001 * table["o"].get("row_blocks", 0)

        return table, coordinate_sweep(measure, table, ("o",), STREAM_CANDIDATES, rounds=1,
                                       keep_competes=keep_competes)

    table, result = run(True)
    assert table["o"] == dict(block_n=2, num_warps=2, whole_rows=True) and result["best_ms"] == 1.0
    assert result["trials"][0]["times"]["kept"] == 1.0 and len(result["trials"][0]["times"]) == 25
    table, result = run(False)
    assert table["o"]["row_blocks"] == 2 and result["best_ms"] > 1.0


def test_progress_reports_each_product_as_it_ends():
    """A sweep cut off by the call's deadline keeps what it timed: progress() gets the trials so far after each
    product, the last report naming the same winners as the result."""
    table = {"qkv": dict(block_n=4, num_warps=4), "o": dict(block_n=2, num_warps=4)}
    reports = []

    def measure():
        return 1.0 + 0.01 * table["qkv"]["block_n"] + 0.001 * table["o"]["num_warps"]

    result = coordinate_sweep(measure, table, ("qkv", "o"), rounds=1,
                              progress=lambda partial: reports.append(json_copy(partial)))
    assert [len(r["trials"]) for r in reports] == [1, 2] and all(r["partial"] for r in reports)
    assert reports[0]["best"]["qkv"]["block_n"] == 1 and reports[0]["best"]["o"] == dict(block_n=2, num_warps=4)
    assert reports[-1]["best"] == result["best"] and reports[-1]["best_ms"] == result["best_ms"]


def json_copy(obj):
    import json
    return json.loads(json.dumps(obj))


def test_the_fine_talker_stage_names_every_product_and_keeps_its_entry_competing():
    """Stage "talker_fine": candidates for each talker product, each a distinct launch (no two the same key),
    the whole-row kernel (row_blocks 1) among qkv's and o's, today's streamed ones among gate/up's and down's."""
    from bench.step_sweep import PRODUCTS, TALKER_FINE_CANDIDATES, _key
    from tts_engine.runtime.talker_launch import TALKER_PDL_LAUNCH

    assert set(TALKER_FINE_CANDIDATES) == set(PRODUCTS["talker"])
    for name, cands in TALKER_FINE_CANDIDATES.items():
        assert len({_key(c) for c in cands}) == len(cands), name
        today = {k: TALKER_PDL_LAUNCH[name].get(k, 1) for k in ("block_n", "num_warps", "row_blocks")}
        assert any(all(c.get(k, 1) == v for k, v in today.items()) for c in cands), name
    assert all(any(c["row_blocks"] == 1 for c in TALKER_FINE_CANDIDATES[n]) for n in ("qkv", "o"))
