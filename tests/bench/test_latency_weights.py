"""bench.latency_weights' bounds and A/Bs (`bench.latency --experiments cp_l2,cp_bytes`): which variants each times,
with which settings, and that the runner's own are restored, on the stand-in runner (tests/bench/stand_in.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from bench import latency_weights as weights
from tests.bench.stand_in import StandInRunner, fake_timing


def test_cp_l2_times_each_policy_and_the_shared_weights_bound_and_restores_the_runner(monkeypatch):
    """--experiments cp_l2: the frame with each L2 policy and with every layer (and codebook) reading the first one's
    weights, interleaved, at the PDL batches the runner holds; no set-aside variant where the CUDA runtime cannot be
    reached (this machine); the runner's settings restored."""
    from tts_engine.runtime.fused import FusedStack

    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
    runner.max_slots = 1
    cp = runner.code_predictor
    layers = [SimpleNamespace(name=f"layer{i}") for i in range(3)]
    cp.stack = FusedStack(layers, torch.ones(4), 2, 1, 2, 8, 1e-6, torch.ones(1))
    cp.heads = torch.arange(15.0)[:, None, None].expand(15, 2, 4).contiguous()
    cp.l2_policy = {"own": "x"}
    seen = []
    cp.predict = lambda *a, **k: seen.append((dict(cp.l2_policy), [x.name for x in cp.stack.layers],
                                              cp.heads[:, 0, 0].tolist()))
    out = weights.cp_l2_times(runner, 11, rounds=1)
    names = ["l2none", "l2first", "l2gu01", "l2gu012", "l2down", "l2qkv", "l2gu01nf", "l2shared"]
    assert isinstance(out["max_persisting_l2"], str)  # no libcudart in this CPU process
    assert set(out[1]) == {f"{stage}_{n}_ms" for stage in ("code_predictor_frame", "frame_step") for n in names}
    by_name = dict(zip(names, seen))
    kept = {n: sorted(k for k, v in p.items() if v == "evict_last") for n, (p, _, _) in by_name.items()}
    assert kept["l2gu01"] == kept["l2gu01nf"] == [("gate_up", 0), ("gate_up", 1)]
    assert kept["l2down"] == [("down", i) for i in range(3)] and kept["l2qkv"] == [("qkv", 1), ("qkv", 2)]
    assert by_name["l2first"][0] == {**{(p, i): "evict_first" for p in ("qkv", "o", "gate_up", "down")
                                        for i in range(3)}, **{("head", j): "evict_first" for j in range(15)}}
    assert len(by_name["l2gu01"][0]) == 4 * 3 + 15 and len(by_name["l2gu01nf"][0]) == 2
    assert by_name["l2none"][1:] == (["layer0", "layer1", "layer2"], [float(j) for j in range(15)])
    assert by_name["l2shared"][1:] == (["layer0"] * 3, [0.0] * 15)
    assert cp.l2_policy == {"own": "x"} and [x.name for x in cp.stack.layers] == ["layer0", "layer1", "layer2"]
    assert cp.heads[:, 0, 0].tolist() == [float(j) for j in range(15)]


def test_cp_bytes_times_each_bound_on_free_rows_and_restores_the_runner(monkeypatch):
    """--experiments cp_bytes: the frame with the weights as they are, with every product's (and head's) rows aliasing
    their first, and with one product's so; the aliased views keep the shapes and the unit column stride the kernels
    need and read the first row's values; the runner's stack and heads restored."""
    from tts_engine.runtime.fused import FusedLayer, FusedStack

    fake_timing(monkeypatch)
    runner = StandInRunner(gemv_rows=2)
    runner.max_slots = 1
    cp = runner.code_predictor

    def matrix(n, k):
        return torch.arange(n * k, dtype=torch.float32).view(n, k)

    layer = FusedLayer(matrix(6, 4), matrix(4, 4), matrix(8, 4), matrix(4, 4), *(torch.ones(4),) * 4)
    cp.stack = FusedStack([layer, layer], torch.ones(4), 2, 1, 2, 4, 1e-6, torch.ones(1))
    cp.heads = torch.arange(15 * 3 * 4, dtype=torch.float32).view(15, 3, 4)
    own_stack, own_heads = cp.stack, cp.heads
    seen = {}
    names = iter(["bytes", "nobytes", "noqkv", "noo", "nogu", "nodown"])
    cp.predict = lambda *a, **k: seen.setdefault(next(names), (cp.stack, cp.heads))
    out = weights.cp_bytes_times(runner, 11, rounds=1)
    assert set(out[1]) == {f"{stage}_{n}_ms" for stage in ("code_predictor_frame", "frame_step") for n in seen}

    def aliased(w) -> bool:
        return w.stride() == (0, 1) and torch.equal(w, w[:1].expand_as(w))

    stack, heads = seen["nobytes"]
    for got in stack.layers:
        assert all(aliased(getattr(got, f"w_{p}")) for p in ("qkv", "o", "gate_up", "down"))
        assert got.w_qkv.shape == layer.w_qkv.shape and got.w_qkv[5, 3] == layer.w_qkv[0, 3]
    assert heads.shape == own_heads.shape and all(aliased(heads[j]) for j in range(15))
    stack, heads = seen["nogu"]
    assert aliased(stack.layers[1].w_gate_up) and not aliased(stack.layers[1].w_down) and heads is own_heads
    assert seen["bytes"] == (own_stack, own_heads) and (cp.stack, cp.heads) == (own_stack, own_heads)
