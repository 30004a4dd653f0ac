"""A stand-in for bench.latency's runner and timing, shared by its CPU tests (tests/bench/test_latency_*.py): the
real stages need a GPU (CUDA graphs and events), and their numbers are the GPU run's; the tests check the
bookkeeping around them."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from bench import latency, latency_stages, stages


class StandInRunner:
    """Records what the stages call it with (the real stages need a GPU: CUDA graphs and events)."""

    def __init__(self, gemv_rows: int, talker_gemv_rows: int = 0):
        self.device, self.max_context, self.use_triton, self.attention_version = torch.device("cpu"), 512, True, 2
        self.talker_gemv_rows = talker_gemv_rows
        self.qk_attention_context, self.talker_qk_attention, self.talker_qk_attention_launch = 256, False, {}
        self.hidden = torch.zeros(64, 8)
        self.rows = SimpleNamespace(gather=lambda slots: slots)
        self.calls = []
        cp = SimpleNamespace(gemv_rows=gemv_rows, mma_rows=0, pdl=False, use_triton=True)
        cp.predict = lambda *a, **k: self.calls.append(("cp", cp.gemv_rows, cp.mma_rows, cp.pdl))
        self.code_predictor = cp

    def qk_attention_serves(self, rows: int, max_position: int) -> bool:  # the runner's rule
        return rows <= self.talker_gemv_rows and max_position < self.qk_attention_context

    def _talker_decode(self, *a):
        self.calls.append(("talker", self.attention_version, self.talker_gemv_rows))

    def _frame_step(self, *a):
        self.calls.append(("step", self.attention_version, self.talker_gemv_rows, self.code_predictor.gemv_rows,
                           self.code_predictor.mma_rows))


def fake_timing(monkeypatch):
    """The stages' graphs are the calls themselves, each timed as 1 ms (a call that returns nothing)."""
    fakes = {"graph_of": lambda fn: fn, "cuda_time_ms": lambda fn: fn() or 1.0}
    # the table's own timings (bench/latency_stages.py; bench/latency.py's prefill), and the variants' (bench/stages.py)
    for module in (latency, latency_stages, stages):
        for name, fake in fakes.items():
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fake)
