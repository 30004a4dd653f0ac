"""`bench.latency --experiments` A/Bs and bounds on what the code predictor's weights' bytes cost its batch-1 frame
(run 27, docs/benchmarks.md): `cp_l2` gives its PDL launches' weights L2 eviction priorities
(`CodePredictorRunner.l2_policy`, with the device's persisting set-aside as one variant); `cp_bytes` makes every
product's rows alias their first, so that the same launches read almost no bytes. Each is fn(runner, t_len) ->
result, timed through bench/stages.py (`frame_times`) like bench/latency_experiments.py's.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from bench.stages import frame_times


def l2_policy_keeping(n_layers: int, keep: tuple[tuple[str, int], ...], rest: str = "evict_first") -> dict:
    """code_predictor.CodePredictorRunner.l2_policy keeping `keep` in L2 ("evict_last") and giving every other
    product of a pass (each layer's qkv, o, gate/up, down; the 15 heads) `rest`."""
    policy = {(name, i): rest for name in ("qkv", "o", "gate_up", "down") for i in range(n_layers)}
    policy |= {("head", j): rest for j in range(15)}
    return {key: v for key, v in (policy | dict.fromkeys(keep, "evict_last")).items() if v}


def _cudart():
    """The CUDA runtime library this process loaded (torch's), through ctypes."""
    import ctypes

    maps = Path("/proc/self/maps").read_text().splitlines()
    return ctypes.CDLL(next(line.split()[-1] for line in maps if "libcudart" in line))


class _PersistingL2:
    """The code predictor's settings as attributes (for `interleaved_times`), and `persisting_l2`: the device's L2
    set-aside for persisting lines in bytes (cudaDeviceSetLimit's cudaLimitPersistingL2CacheSize, through the
    libcudart this process loaded), 0 by default."""

    def __init__(self, cp):
        object.__setattr__(self, "_cp", cp)
        object.__setattr__(self, "_persisting", 0)

    def __getattr__(self, name):
        return self._persisting if name == "persisting_l2" else getattr(self._cp, name)

    def __setattr__(self, name, value):
        if name != "persisting_l2":
            setattr(self._cp, name, value)
            return
        import ctypes

        status = _cudart().cudaDeviceSetLimit(6, ctypes.c_size_t(value))  # cudaLimitPersistingL2CacheSize
        if status != 0:
            raise RuntimeError(f"cudaDeviceSetLimit(persisting L2, {value}) returned {status}")
        object.__setattr__(self, "_persisting", value)


def max_persisting_l2() -> int:
    """cudaDevAttrMaxPersistingL2CacheSize of device 0, bytes."""
    import ctypes

    value = ctypes.c_int()
    status = _cudart().cudaDeviceGetAttribute(ctypes.byref(value), 108, 0)  # cudaDevAttrMaxPersistingL2CacheSize
    if status != 0:
        raise RuntimeError(f"cudaDeviceGetAttribute(max persisting L2) returned {status}")
    return value.value


def cp_l2_times(runner, t_len: int, rounds: int = 3, batches=(1, 2)) -> dict:
    """The code predictor's frame (and the frame step) with its PDL passes' weights given L2 eviction priorities
    (`CodePredictorRunner.l2_policy`): none ("l2none"); every product evict_first ("l2first"); gate/up of layers 0-1
    or 0-2, down of every layer, qkv of layers 1-4 kept (evict_last; 25 / 38 / 31 / 34 MB at 1.7B), the rest
    evict_first ("l2gu01", "l2gu012", "l2down", "l2qkv"); gate/up 0-1 kept, the rest unhinted ("l2gu01nf"); gate/up
    0-1 kept with the device's largest L2 set-aside for persisting lines ("l2gu01pers"). And a bound, not a
    configuration: every layer reading layer 0's weights and every codebook the first head ("l2shared": ~35 MB a
    pass, what L2 could hold), at each of `batches` (the PDL passes), interleaved rounds -> {batch: {key: median
    ms}, "max_persisting_l2": bytes}."""
    import dataclasses

    cp = runner.code_predictor
    n = len(cp.stack.layers)
    shared = dataclasses.replace(cp.stack, layers=[cp.stack.layers[0]] * n)
    policy = partial(l2_policy_keeping, n)
    gu01 = (("gate_up", 0), ("gate_up", 1))
    variants = {"l2none": {"l2_policy": {}}, "l2first": {"l2_policy": policy(())},
                "l2gu01": {"l2_policy": policy(gu01)},
                "l2gu012": {"l2_policy": policy((*gu01, ("gate_up", 2)))},
                "l2down": {"l2_policy": policy(tuple(("down", i) for i in range(n)))},
                "l2qkv": {"l2_policy": policy(tuple(("qkv", i) for i in range(1, n)))},
                "l2gu01nf": {"l2_policy": policy(gu01, rest="")},
                "l2shared": {"stack": shared, "heads": cp.heads[:1].expand_as(cp.heads), "l2_policy": {}}}
    out: dict = {}
    try:
        out["max_persisting_l2"] = most = max_persisting_l2()
        variants["l2gu01pers"] = {"l2_policy": policy(gu01), "persisting_l2": most}
    except (StopIteration, OSError, AttributeError, RuntimeError) as exc:
        out["max_persisting_l2"] = f"{type(exc).__name__}: {exc}"
    out |= frame_times(runner, t_len, _PersistingL2(cp), variants, rounds, batches,
                        "the code predictor's weights' L2 priorities")
    return out


def _free_rows(stack, products: tuple[str, ...]):
    """`stack` (a FusedStack) with the weights of `products` ("qkv", "o", "gate_up", "down") in every layer replaced by
    views whose rows all alias the first (row stride 0, the column stride 1 the kernels need): the same launches and
    shapes, nearly no bytes read (a row stays in L1/L2). Not a model: a bound on what the weights' bytes cost."""
    import dataclasses

    def free(w):
        return w[:1].expand_as(w)

    return dataclasses.replace(stack, layers=[dataclasses.replace(layer, **{
        f"w_{p}": free(getattr(layer, f"w_{p}")) for p in products}) for layer in stack.layers])


def cp_bytes_times(runner, t_len: int, rounds: int = 3, batches=(1, 2)) -> dict:
    """Bounds, not configurations: the code predictor's frame (and the frame step) with the weights as they are
    ("bytes"), with every product's rows and every head's aliasing their first row, so that the launches read
    almost no bytes ("nobytes": the chain of dependent launches alone), and with only qkv, attention + o's w_o,
    gate/up or down so ("noqkv", "noo", "nogu", "nodown"), at each of `batches`, interleaved rounds -> {batch: {key:
    median ms}}."""
    cp = runner.code_predictor
    free_heads = cp.heads[:, :1].expand_as(cp.heads)
    variants = {"bytes": {}, "nobytes": {"stack": _free_rows(cp.stack, ("qkv", "o", "gate_up", "down")),
                                         "heads": free_heads}}
    for key, product in (("noqkv", "qkv"), ("noo", "o"), ("nogu", "gate_up"), ("nodown", "down")):
        variants[key] = {"stack": _free_rows(cp.stack, (product,))}
    return frame_times(runner, t_len, cp, variants, rounds, batches, "the code predictor's weights' bytes")
