"""The engine thread never makes the host wait for the device by accident.

`device_tensor[i] = python_value` turns the value into a pageable host tensor and copies it into
the device tensor; on CUDA that copy waits for everything queued on the stream (at
40 req/s: 5.3 ms per new stream in `SamplingRows.set_row`, the GPU idle while the engine thread
waited, three syncs per prefill). On CPU the copy is harmless, but it shows in the dispatched ops:
an `aten.copy_` whose source came from `aten.lift_fresh` (a Python value made a tensor). This test
records every op of the engine's iterations while streams start, decode and finish, and allows none.
"""

from __future__ import annotations

import asyncio

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.engine.helpers import LONG, SHORT, collect, options, start_engine


class _HostCopies(TorchDispatchMode):
    """Ops whose source is a Python value made into a host tensor by the op before."""

    def __init__(self):
        super().__init__()
        # This iteration's lift_fresh outputs, held so that no other tensor can take one's id().
        self.fresh: dict[int, torch.Tensor] = {}
        self.found: list[str] = []
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        name = str(func)
        if name.startswith("aten.lift_fresh"):
            self.fresh[id(out)] = out
        elif name.startswith("aten.copy_") and len(args) > 1 and self.fresh.get(id(args[1])) is args[1]:
            self.found.append(f"{name} into {tuple(args[0].shape)} {args[0].dtype}")
        return out


def test_engine_iterations_copy_no_python_value_into_a_tensor(tiny_checkpoint):
    engine = start_engine(tiny_checkpoint, max_active_streams=4)
    recorder = _HostCopies()
    real_step = engine._step

    def recorded_step() -> bool:
        recorder.fresh.clear()
        with recorder:
            return real_step()

    engine._step = recorded_step  # the engine thread looks it up each iteration

    async def run() -> list:
        streams = [engine.open_stream(options(seed=i), text, end_input=True)
                   for i, text in enumerate((SHORT, LONG, SHORT))]
        return await asyncio.gather(*(collect(s) for s in streams))

    try:
        events = asyncio.run(run())
    finally:
        engine._step = real_step
        asyncio.run(engine.stop())
    assert engine.fault is None, engine.fault
    assert all(events), [len(e) for e in events]
    assert recorder.ops > 1000, recorder.ops  # prefills, frame steps and codec chunks ran under the recorder
    assert recorder.found == [], f"blocking host-to-device copies in the engine thread: {recorder.found[:5]}"


def test_the_recorder_catches_a_scalar_assignment():
    t, recorder = torch.zeros(4), _HostCopies()
    with recorder:
        t[1].fill_(2.0)
        assert recorder.found == []
        t[2] = 3.0
    assert len(recorder.found) == 1
