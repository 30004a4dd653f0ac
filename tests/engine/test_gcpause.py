"""engine/gcpause.py: the warm heap exempt from cyclic collection, and every collection's pause counted."""

from __future__ import annotations

import gc
import weakref

import pytest

from tts_engine.engine.gcpause import GcPauses, freeze_heap


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def frozen():
    yield freeze_heap
    gc.unfreeze()  # the rest of the test process collects as usual


def test_freeze_heap_collects_first_then_exempts_what_is_alive(frozen):
    garbage = Node()
    dead = weakref.ref(garbage)
    del garbage
    kept = Node()
    alive_at_freeze = weakref.ref(kept)
    assert frozen() > 0
    assert dead() is None  # collected before the freeze, not kept forever
    del kept  # unreachable now, but frozen: a full collection no longer walks it
    later = Node()
    made_after = weakref.ref(later)
    del later
    gc.collect()
    assert alive_at_freeze() is not None
    assert made_after() is None


def test_pauses_count_each_collection_while_installed():
    pauses = GcPauses().install()
    try:
        gc.collect()
        gc.collect(0)
        stats = pauses.stats()
        assert stats["gc_pauses"] >= 2
        assert 0 < stats["gc_pause_max_s"] <= stats["gc_pause_sum_s"]
    finally:
        pauses.remove()
    count = pauses.count
    gc.collect()
    assert pauses.count == count
    assert pauses._callback not in gc.callbacks


def test_reset_forgets_the_collections_before_it(frozen):
    pauses = GcPauses().install()
    try:
        frozen()  # the engine's freeze: a full collection of the warm heap, before it serves
        assert pauses.count >= 1
        pauses.reset()
        stats = pauses.stats()
        assert stats["gc_pauses"] == 0 and stats["gc_pause_max_s"] == 0 and stats["gc_pause_sum_s"] == 0
        gc.collect()
        assert pauses.stats()["gc_pauses"] >= 1
    finally:
        pauses.remove()


def test_stats_report_the_frozen_count_without_walking_the_frozen_heap(monkeypatch):
    """/metrics reads these on the event loop: `gc.get_freeze_count` walks every frozen object with the
    GIL held (17 ms for 183k here), so the count is the one `freeze_heap` took."""
    pauses = GcPauses()
    pauses.frozen_objects = 183_000

    def walk():
        raise AssertionError("stats() walked the permanent generation")

    monkeypatch.setattr(gc, "get_freeze_count", walk)
    assert pauses.stats()["gc_frozen_objects"] == 183_000.0


def test_an_engine_freezes_its_warm_heap_and_thaws_it_when_stopped(tiny_checkpoint):
    """`freeze_gc`: the warm heap frozen (and counted once, for /metrics), and collectable again after
    `stop()`; left frozen, the interpreter's exit would never free it (and triton's bindings would
    report each of their objects as leaked)."""
    import asyncio

    from tts_engine.engine.core import StreamingEngine

    engine = StreamingEngine(tiny_checkpoint, max_active_streams=1, freeze_gc=True)

    async def run():
        await engine.start()
        try:
            frozen = engine.metrics()["gc_frozen_objects"]  # at the freeze; some have been freed since
            assert frozen > 10_000 and 0.9 * frozen < gc.get_freeze_count() <= frozen
        finally:
            await engine.stop()

    try:
        asyncio.run(run())
        assert gc.get_freeze_count() == 0 and engine.metrics()["gc_frozen_objects"] == 0
    finally:
        gc.unfreeze()
