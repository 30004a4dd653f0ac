"""Engine fixtures: module-scoped engines on the tiny checkpoint, checked empty after every test."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.helpers import assert_empty, start_engine
from tests.threads import one_torch_thread
from tts_engine.synthesizer import Synthesizer


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def engine(tiny_checkpoint, one_thread):
    eng = start_engine(tiny_checkpoint, max_active_streams=24)
    yield eng
    asyncio.run(eng.stop())
    assert eng.fault is None


@pytest.fixture(scope="module")
def small_engine(tiny_checkpoint, one_thread):
    eng = start_engine(tiny_checkpoint, max_active_streams=1, max_queued_streams=1)
    yield eng
    asyncio.run(eng.stop())
    assert eng.fault is None


@pytest.fixture(scope="module", params=[0, 3], ids=["own-schedules", "codec-tick-3"])
def pipelined_engine(request, tiny_checkpoint, one_thread):
    """Depth 2 as on CUDA: step k+1 is launched before step k is read (on CPU each step is done
    when launched, so this runs the in-flight logic, not the overlap); with each stream on its own
    chunk schedule, and with the codec tick of the CUDA engine."""
    # No yielding: whether a stream far ahead of its listener yields depends on this CPU's speed
    # (the cost model), and these tests count the frames launched ahead of each EOS read. Lookahead
    # while any stream decodes for the same reason (a stream ahead of its listener would run one step
    # at a time; test_pipelining.py tests that rule on its own engine).
    eng = start_engine(tiny_checkpoint, pipeline_depth=2, max_active_streams=8, codec_tick_steps=request.param,
                       yield_buffer_s=1e9, lookahead_buffer_s=1e9)
    yield eng
    asyncio.run(eng.stop())
    assert eng.fault is None


@pytest.fixture(autouse=True)
def engines_empty_after_each_test(request):
    yield
    for name in ("engine", "small_engine", "pipelined_engine"):
        if name in request.fixturenames:
            assert_empty(request.getfixturevalue(name))


@pytest.fixture(scope="module")
def synth(tiny_checkpoint) -> Synthesizer:
    return Synthesizer(tiny_checkpoint)

