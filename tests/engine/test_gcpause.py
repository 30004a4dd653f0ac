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
