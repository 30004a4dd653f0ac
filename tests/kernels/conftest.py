"""Kernel tests: each Triton kernel equals its torch reference on odd, tiny shapes.

On a machine without a GPU the kernels run through Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before anything imports them); with a GPU the same tests check the compiled
kernels. Outputs are allocated poisoned (NaN), so an element a kernel fails to write shows up.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.threads import one_torch_thread


@pytest.fixture(scope="session")
def device() -> torch.device:
    from tts_engine.kernels.backend import HAVE_TRITON, runs_on

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not HAVE_TRITON:
        pytest.fail("triton is not importable: the kernel tests need it on CPU too (pip install 'triton>=3.1')")
    if not runs_on(dev):
        pytest.fail("Triton kernels are compiled but there is no GPU: TRITON_INTERPRET=1 must be set before "
                    "triton is first imported (tests/conftest.py does it)")
    return dev


@pytest.fixture(autouse=True)
def poisoned_allocations(monkeypatch):
    """torch.empty / empty_like return NaN-filled floats for the duration of a test."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t: torch.Tensor) -> torch.Tensor:
        return t.fill_(math.nan) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: poison(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: poison(empty_like(*a, **k)))


@pytest.fixture(autouse=True)
def one_thread():
    with one_torch_thread():
        yield
